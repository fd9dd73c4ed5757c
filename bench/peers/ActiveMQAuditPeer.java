/*
 * ActiveMQAuditPeer — feeds a file of message ids through ActiveMQ Classic's own
 * duplicate audit, org.apache.activemq.ActiveMQMessageAuditNoSync, so acemq's
 * C audit can be compared with it on the same ids: decision for decision
 * (--decisions) and in ns per id (--time). See docs/performance.md, "message
 * audit: the ActiveMQ peer". Run it through activemq-peer.sh, which compiles
 * it and finds the jars.
 *
 * Ids are ActiveMQ-style, "<producer>:<sequence>", one per line, parsed the
 * way ActiveMQ parses them: new MessageId(String) splits at the last ':' (the
 * sequence a signed long after it) and the producer part again into
 * connection id, session id and producer value (ProducerId(String)).
 *
 * --decisions  one line per id: "new" or "duplicate" (or "error" when
 *              ActiveMQ cannot parse the id), streamed; totals on stderr.
 * --time       parses every id into a MessageId first (not timed; one shared
 *              ProducerId per producer, as OpenWire's marshalling cache gives a
 *              broker), then runs the whole stream through fresh audits:
 *              WARMUP untimed passes for the JIT, then REPS timed ones, each on
 *              a fresh audit, and prints the median ns per id on stdout
 *              ("ns_per_id X", then a human line with every repetition).
 *              --api string times isDuplicate(String) on the text ids instead:
 *              ActiveMQ's own parsing inside the loop.
 * --serve      with --time: after the warm-up, prints "ready" and then runs
 *              one timed pass for each line "pass" read on stdin, printing
 *              "ns X" for it, until "end" or the end of input; then the two
 *              lines of --time over the passes run. For a caller that
 *              alternates the peer's passes with its own (bench_audit), so
 *              that both sides meet the machine in the same states.
 *
 * Exit status: 0 done, 1 an error (unreadable file, bad id in --time), 2 usage.
 */

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;

import org.apache.activemq.ActiveMQMessageAuditNoSync;
import org.apache.activemq.command.MessageId;
import org.apache.activemq.command.ProducerId;

public final class ActiveMQAuditPeer {
    private static final String USAGE =
        "usage: activemq-peer.sh (--decisions | --time) [--depth N] [--producers N]\n"
        + "                        [--api messageid|string] [--reps N] [--warmup N] [--serve] FILE|-\n"
        + "  --decisions     print new/duplicate for each id, in order\n"
        + "  --time          print the median ns per id of the audit's check loop\n"
        + "  --depth N       auditDepth (default 2048)\n"
        + "  --producers N   maximumNumberOfProducersToTrack (default 64)\n"
        + "  --api messageid isDuplicate(MessageId) on ids parsed beforehand (default)\n"
        + "  --api string    isDuplicate(String): ActiveMQ parses the text id in the loop\n"
        + "  --reps N        timed repetitions (default 15)\n"
        + "  --serve         with --time: one timed pass per line \"pass\" on stdin\n"
        + "  --warmup N      untimed warm-up passes (default 5)\n";

    private ActiveMQAuditPeer() {
    }

    private static void usage(String why) {
        if (why != null) System.err.println("activemq-peer: " + why);
        System.err.print(USAGE);
        System.exit(2);
    }

    private static int intArg(String[] args, int i, String name) {
        if (i >= args.length) usage(name + " needs a value");
        try {
            int v = Integer.parseInt(args[i]);
            if (v <= 0) usage(name + " must be positive");
            return v;
        } catch (NumberFormatException e) {
            usage(name + ": not a number: " + args[i]);
        }
        return 0; // not reached
    }

    private static Reader open(String path) throws IOException {
        if (path.equals("-")) return new InputStreamReader(System.in, StandardCharsets.UTF_8);
        return Files.newBufferedReader(Paths.get(path), StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws IOException {
        String mode = null, file = null, api = "messageid";
        boolean serve = false;
        int depth = ActiveMQMessageAuditNoSync.DEFAULT_WINDOW_SIZE;
        int producers = ActiveMQMessageAuditNoSync.MAXIMUM_PRODUCER_COUNT;
        int reps = 15, warmup = 5;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
            case "--decisions": case "--time": mode = args[i]; break;
            case "--serve": serve = true; break;
            case "--depth": depth = intArg(args, ++i, "--depth"); break;
            case "--producers": producers = intArg(args, ++i, "--producers"); break;
            case "--reps": reps = intArg(args, ++i, "--reps"); break;
            case "--warmup": warmup = intArg(args, ++i, "--warmup"); break;
            case "--api":
                if (++i >= args.length) usage("--api needs a value");
                api = args[i];
                if (!api.equals("messageid") && !api.equals("string")) usage("--api: " + api);
                break;
            case "-h": case "--help": System.out.print(USAGE); return;
            default:
                if (args[i].startsWith("--") || file != null) usage("unexpected argument: " + args[i]);
                file = args[i];
            }
        }
        if (mode == null) usage("give --decisions or --time");
        if (file == null) usage("give an id file (or - for stdin)");
        if (serve && !mode.equals("--time")) usage("--serve goes with --time");
        if (serve && file.equals("-")) usage("--serve reads its commands on stdin: give a file");
        try {
            if (mode.equals("--decisions")) decisions(file, depth, producers, api);
            else time(file, depth, producers, api, reps, warmup, serve);
        } catch (java.nio.file.NoSuchFileException e) {
            System.err.println("activemq-peer: " + file + ": no such file");
            System.exit(1);
        } catch (IOException e) {
            System.err.println("activemq-peer: " + file + ": " + e);
            System.exit(1);
        }
    }

    /* ------------------------------------------------------------ decisions */

    private static void decisions(String file, int depth, int producers, String api)
        throws IOException {
        ActiveMQMessageAuditNoSync audit = new ActiveMQMessageAuditNoSync(depth, producers);
        boolean byString = api.equals("string");
        long n = 0, dups = 0, errors = 0;
        try (BufferedReader in = new BufferedReader(open(file), 1 << 16);
             BufferedWriter out = new BufferedWriter(
                 new OutputStreamWriter(System.out, StandardCharsets.US_ASCII), 1 << 16)) {
            String line;
            while ((line = in.readLine()) != null) {
                n++;
                boolean dup;
                try {
                    dup = byString ? audit.isDuplicate(line) : audit.isDuplicate(new MessageId(line));
                } catch (RuntimeException e) { // NumberFormatException and the like
                    errors++;
                    out.write("error\n");
                    continue;
                }
                if (dup) dups++;
                out.write(dup ? "duplicate\n" : "new\n");
            }
        }
        System.err.printf("activemq-peer: %d ids, %d new, %d duplicate, %d error%n", n,
                          n - dups - errors, dups, errors);
    }

    /* ----------------------------------------------------------------- time */

    private static volatile long sink; // keeps the decisions alive

    private static long passIds(MessageId[] ids, int depth, int producers) {
        ActiveMQMessageAuditNoSync audit = new ActiveMQMessageAuditNoSync(depth, producers);
        long dups = 0;
        for (MessageId id : ids)
            if (audit.isDuplicate(id)) dups++;
        return dups;
    }

    private static long passStrings(String[] ids, int depth, int producers) {
        ActiveMQMessageAuditNoSync audit = new ActiveMQMessageAuditNoSync(depth, producers);
        long dups = 0;
        for (String id : ids)
            if (audit.isDuplicate(id)) dups++;
        return dups;
    }

    private static void time(String file, int depth, int producers, String api, int reps,
                             int warmup, boolean serve) throws IOException {
        ArrayList<String> lines = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(open(file), 1 << 16)) {
            String line;
            while ((line = in.readLine()) != null) lines.add(line);
        }
        int n = lines.size();
        if (n == 0) {
            System.err.println("activemq-peer: " + file + ": no ids");
            System.exit(1);
        }
        boolean byString = api.equals("string");
        String[] strings = null;
        MessageId[] ids = null;
        if (byString) {
            strings = lines.toArray(new String[0]);
        } else {
            // Parsed before the clock, as a broker has the MessageId from the wire,
            // and with one ProducerId object per producer, as a broker's OpenWire
            // cache gives it: the producer key isDuplicate looks up
            // (ProducerId.toString(), cached in the object) is built once and is
            // the very String the audit's map holds. The timed loop is the audit's
            // lookup and bit work alone, the most favourable case for ActiveMQ.
            HashMap<String, ProducerId> producerIds = new HashMap<>();
            ProducerId[] pids = new ProducerId[n];
            long[] seqs = new long[n];
            for (int i = 0; i < n; i++) {
                MessageId parsed = null;
                try {
                    parsed = new MessageId(lines.get(i));
                } catch (RuntimeException e) {
                    System.err.println("activemq-peer: line " + (i + 1) + ": not an ActiveMQ id: "
                                       + lines.get(i));
                    System.exit(1);
                }
                ProducerId pid = parsed.getProducerId();
                pids[i] = producerIds.computeIfAbsent(pid.toString(), k -> pid);
                seqs[i] = parsed.getProducerSequenceId();
            }
            // Allocated together, so the timed loop reads them in address order.
            ids = new MessageId[n];
            for (int i = 0; i < n; i++) ids[i] = new MessageId(pids[i], seqs[i]);
        }
        lines = null;

        long dups = 0;
        for (int w = 0; w < warmup; w++)
            dups = byString ? passStrings(strings, depth, producers) : passIds(ids, depth, producers);
        System.gc(); // not during the timed passes, as far as we can help it

        ArrayList<Double> passes = new ArrayList<>();
        BufferedReader commands = serve
            ? new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII)) : null;
        if (serve) {
            System.out.println("ready");
            System.out.flush();
        }
        for (int r = 0; serve || r < reps; r++) {
            if (serve) {
                String command = commands.readLine();
                if (command == null || command.equals("end")) break;
                if (!command.equals("pass")) {
                    System.err.println("activemq-peer: --serve: unknown command: " + command);
                    System.exit(2);
                }
            }
            long t0 = System.nanoTime();
            long d = byString ? passStrings(strings, depth, producers) : passIds(ids, depth, producers);
            long t1 = System.nanoTime();
            passes.add((double)(t1 - t0) / n);
            if (warmup > 0 && d != dups) {
                System.err.println("activemq-peer: duplicates differ between passes");
                System.exit(1);
            }
            dups = d;
            sink += d;
            if (serve) {
                System.out.printf("ns %.3f%n", passes.get(passes.size() - 1));
                System.out.flush();
            }
        }
        reps = passes.size();
        if (reps == 0) {
            System.err.println("activemq-peer: --serve: no pass was asked for");
            System.exit(1);
        }
        double[] ns = new double[reps];
        for (int r = 0; r < reps; r++) ns[r] = passes.get(r);
        double[] sorted = ns.clone();
        Arrays.sort(sorted);
        double median = reps % 2 == 1 ? sorted[reps / 2]
                                      : (sorted[reps / 2 - 1] + sorted[reps / 2]) / 2;
        StringBuilder each = new StringBuilder();
        for (double v : ns) each.append(each.length() == 0 ? "" : " ").append(String.format("%.1f", v));
        // One machine-readable line first, then a human one.
        System.out.printf("ns_per_id %.2f%n", median);
        System.out.printf("activemq %s: %d ids, %d duplicate, depth %d, producers %d, api %s,"
                          + " median of %d: %.1f ns/id (%s), java %s%n",
                          ActiveMQMessageAuditNoSync.class.getPackage().getImplementationVersion(),
                          n, dups, depth, producers, api, reps, median, each,
                          System.getProperty("java.version"));
    }
}
