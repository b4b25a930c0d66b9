"""Read `go test -json` on stdin, print its text output as it arrives, then a
PASS/FAIL table of the tests that count: a test without subtests, and a test
whose subtests all skipped themselves (its own body did the work, e.g.
franz-go's TestGroupETL/range whose range/848 child skips when KIP-848 is not
offered). A test with a subtest that ran counts through its subtests only.
Skipped tests count neither way. Writes "PASSED FAILED" to argv[1]."""
import json
import sys

res, order = {}, []
for line in sys.stdin:
    try:
        ev = json.loads(line)
    except ValueError:
        sys.stdout.write(line)
        continue
    t, a = ev.get("Test"), ev.get("Action")
    if a == "output":
        sys.stdout.write(ev.get("Output", ""))
        sys.stdout.flush()
    if t and a in ("run", "pass", "fail", "skip"):
        if t not in order:
            order.append(t)
        if a != "run":
            res[t] = a
def kids(t):
    return [o for o in order if o.startswith(t + "/") and "/" not in o[len(t) + 1:]]


leaves = [t for t in order if all(res.get(k) == "skip" for k in kids(t))]
names = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}
print("\n=== tests ===")
for t in leaves:
    print(f"{names.get(res.get(t), 'DID NOT FINISH'):15} {t}")
passed = sum(1 for t in leaves if res.get(t) == "pass")
failed = sum(1 for t in leaves if res.get(t) not in ("pass", "skip"))
with open(sys.argv[1], "w") as fh:
    fh.write(f"{passed} {failed}\n")
