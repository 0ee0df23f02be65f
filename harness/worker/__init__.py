"""The untrusted processes: every process that runs a candidate's code has its code here.

The worker runs one compared model (a candidate, or torch.compile of the reference). It is started
by `harness.parent.supervise` as `python -m harness.worker` (`__main__`); it imports torch, then
reads its job (`harness.core.protocol.WorkerJob`) as one JSON line on stdin, so a worker can be started
ahead of its job. It never decides a verdict, and never sees an expected output: it loads the
module (building inline extensions through the content-addressed cache), constructs the model,
runs the planned forward calls on the inputs the judge staged in its region, puts each step's
outputs in the judge's mailbox, times the forward, and reports each step on the authenticated
result channel. Anything it prints goes to a log, never into the results.

Modules: `candidate` and `baseline` (one run sequence per role) and `compared` (what they share:
the data plane, phases, weight loading). Two short-lived processes besides it: `build` (imports a
candidate so its extensions compile, ahead of its worker) and `sanitized` (one forward under
compute-sanitizer). The helpers the judge runs the reference with too live in
harness.device (`failures`, `setup`, `inputs`, `checks`, `timed`). Imports harness.core and
harness.device, never harness.judge.
"""
