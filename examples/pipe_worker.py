#!/usr/bin/env python3
# pipe_worker.py — a child for `acemq consume --pipe -- python3 pipe_worker.py OUT`:
# one JSON request per line in, one JSON answer per line out (docs/consumer.md,
# "The --pipe protocol"). Its effect: the message's id and body appended to OUT.
import base64, json, sys

out = open(sys.argv[1], "a")
for line in sys.stdin:
    msg = json.loads(line)
    try:
        out.write(f"{msg['id']} {base64.b64decode(msg['body']).decode()}\n")
        out.flush()  # the effect is done before the answer says so
        answer = {"id": msg["id"], "ok": True}
    except Exception as e:  # a failure: acemq retries the message after a back-off
        answer = {"id": msg["id"], "ok": False, "error": str(e)}
    print(json.dumps(answer), flush=True)  # standard output carries answers only
