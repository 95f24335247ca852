"""The step harness of the framework checks (jax_check.py, cupy_check.py):
each step prints "PASS <name>/<step> <seconds> [detail]" or
"FAIL <name>/<step> <seconds> <why>", the next steps still run, and the
last line counts them.  VCU_<NAME>_TRACEBACK=1 also prints each failing
step's traceback."""
import os
import sys
import time
import traceback


class Steps:
    def __init__(self, name):
        self.name = name
        self.results = []

    def step(self, step, fn):
        t0 = time.time()
        try:
            detail = fn()
            print("PASS %s/%s %.2f%s" % (self.name, step, time.time() - t0,
                                         (" " + detail) if detail else ""), flush=True)
            self.results.append((step, True))
        except Exception as e:  # the next steps still run
            msg = ("%s: %s" % (type(e).__name__, e)).replace("\n", " ")[:400]
            print("FAIL %s/%s %.2f %s" % (self.name, step, time.time() - t0, msg), flush=True)
            if os.environ.get("VCU_%s_TRACEBACK" % self.name.upper()):
                traceback.print_exc()
            self.results.append((step, False))

    def run(self, steps, needs):
        """steps: (name, fn) pairs; none runs once the step needs failed."""
        for step, fn in steps:
            if step != needs and (needs, False) in self.results:
                print("FAIL %s/%s skipped: %s failed" % (self.name, step, needs), flush=True)
                self.results.append((step, False))
                continue
            self.step(step, fn)

    def done(self):
        print("%s: %d passed, %d failed" % (self.name, sum(1 for _, ok in self.results if ok),
                                            sum(1 for _, ok in self.results if not ok)),
              flush=True)
        sys.stdout.flush()
        os._exit(0)
