# The two commands: `make demo` and `make test`. Everything else wraps CMake.
BUILD       ?= build
BUILD_ASAN  ?= build-asan
BUILD_TSAN  ?= build-tsan
BUILD_BENCH ?= build-release
BUILD_FUZZ  ?= build-fuzz
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX      ?= /usr/local
CMAKE_FLAGS ?=


.PHONY: all deps build test soak demo demo-idem bench install sanitize fuzz format lint clean

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The servers the integration suites talk to, started on loopback for the
# run and stopped afterwards (scripts/services.sh).
SERVICES    ?= redis,postgres,rabbitmq
WITH_SERVICES = scripts/with-services.sh $(SERVICES) --

# ctest exits 0 when a test skips (a server's URL missing); every server is
# up here, so ctest-strict.sh fails the run on a skip instead.
CTEST_STRICT = $(CURDIR)/scripts/ctest-strict.sh

test: build
	$(WITH_SERVICES) sh -c 'cd $(BUILD) && $(CTEST_STRICT) ctest --output-on-failure -j $(JOBS)'

# The fault suite's long runs (tests/fault/soak.sh): every fault script on
# both backends with hundreds of kills, where `make test` runs each a few
# times; sizes from FAULT_ORDERS, FAULT_KILLS and the like (soak.sh).
soak: build
	$(WITH_SERVICES) env FAULT_BUILD=$(BUILD) tests/fault/soak.sh

# The main job, the whole pipeline with faults (examples/demo/demo.sh): orders
# and their outbox rows in one SQLite transaction each, `acemq relay` to a
# RabbitMQ started for the run, two inbox consumers shipping each order; the
# relay, the connections and the consumers are killed or cut on the way, and
# a table accounts for every order. ORDERS sizes it.
ORDERS ?= 2000
demo: build
	scripts/with-services.sh rabbitmq -- examples/demo/demo.sh $(BUILD) $(ORDERS)

# The idempotency store absorbing redeliveries, on SQLite.
demo-idem: build
	$(BUILD)/acemq-demo

bench: deps
	cmake -S . -B $(BUILD_BENCH) -DCMAKE_BUILD_TYPE=Release -DACEMQ_BUILD_TESTS=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_BENCH) -j $(JOBS)
	$(WITH_SERVICES) cmake --build $(BUILD_BENCH) --target bench

install: build
	cmake --install $(BUILD)

# Every suite under ASan+UBSan, and again under TSan (the concurrency tests
# are why; the rest is cheap). Left out: the install check under TSan (it
# builds a consumer with the host's default flags), the integration suites
# under TSan (single-threaded processes talking to servers), and the relay's
# minutes-long fault runs against RabbitMQ under both (the code they drive is
# the same conformance.relay and cli.relay run under both).
sanitize: deps
	cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug -DACEMQ_BUILD_BENCH=OFF \
	  -DACEMQ_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	$(WITH_SERVICES) sh -c 'cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(CTEST_STRICT) ctest --output-on-failure -j $(JOBS) \
	  -E "^integration\.relay_rabbitmq"'
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=Debug -DACEMQ_BUILD_BENCH=OFF \
	  -DACEMQ_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(BUILD_TSAN) -j $(JOBS)
	$(WITH_SERVICES) sh -c 'cd $(BUILD_TSAN) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  $(CTEST_STRICT) setarch -R ctest --output-on-failure -E "^(install|integration|fault)\."'

# The libFuzzer targets (clang only), each for FUZZ_SECONDS over its seed
# corpus, two at a time: ctest's `fuzz` label, registered only with ACEMQ_BUILD_FUZZ.
FUZZ_SECONDS ?= 60
fuzz: deps
	CC=clang cmake -S . -B $(BUILD_FUZZ) -DCMAKE_BUILD_TYPE=Debug -DACEMQ_BUILD_FUZZ=ON \
	  -DACEMQ_BUILD_BENCH=OFF -DACEMQ_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS)
	cmake --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz_audit_id fuzz_route_expr fuzz_route_load \
	  fuzz_url fuzz_headers_json fuzz_amqp_props
	cd $(BUILD_FUZZ) && $(CTEST_STRICT) ctest --output-on-failure -j 2 -L fuzz

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

# The layering of src/ (scripts/check-layers.sh: no include of a higher
# layer, no contract naming a backend), then clang-tidy (.clang-tidy;
# warnings are errors) and cppcheck over every C file.
lint: build
	scripts/check-layers.sh
	scripts/check-tree.sh
	clang-tidy -p $(BUILD) --quiet $$(git ls-files '*.c' | grep -v '^tests/install/')
	cppcheck --enable=warning,performance,portability --error-exitcode=1 --quiet \
	  --inline-suppr -I include -I src $$(git ls-files 'src/*.c')

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_TSAN) $(BUILD_BENCH)
