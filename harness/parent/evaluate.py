"""Evaluate the candidates of one problem on one lane: its judge once, then each candidate in its own worker.

The parent plans secret seeds and starts the lane's judge (harness.judge.service), which runs the reference
through the plan on the device. Each candidate's worker then gets its inputs from the judge (a
region of its own), reports each step, and the judge compares the step's outputs in place; this
process only relays steps and verdicts, never tensors, and writes one record per candidate at once.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import traceback
from typing import Callable, Optional

from harness.core.config import Config, Device
from harness.core.errors import flat
from harness.core.plan import Plan
from harness.core.protocol import Failure
from harness.core.records import (
    AheadBuild,
    CandidateRecord,
    Checks,
    Decision,
    Integrity,
    Provenance,
    ReferenceRecord,
    Timing,
    finished_now,
)
from harness.core.status import Status
from harness.core.store import RunStore
from harness.core.unrun import ahead_warnings
from harness.parent.compared_pass import Setting, judge_candidate
from harness.parent.lane_judge import LaneJudge, ReferencePass, Stopped
from harness.parent.resources import RunResources
from harness.parent.sanitize import LaneSanitizer
from harness.parent.supervise import JudgeFailed, Lane
from harness.sources.candidate import Candidate, needs_cuda_statically
from harness.sources.problem import Problem

__all__ = ["ProblemEvaluation", "problem_global_hint"]


class ProblemEvaluation:
    """One problem on one lane: the reference once (on the first candidate), then candidates one
    at a time. `run()` evaluates every candidate; an executor spreading candidates over several
    lanes gives each lane its own ProblemEvaluation with the same `plan` and calls `evaluate`.
    `resources` (the run's scratch, quiet host, build pool and boundary) and `lane` are the caller's:
    the evaluation uses them and closes neither."""

    def __init__(
        self,
        problem: Problem,
        candidates: list[Candidate],
        cfg: Config,
        device: str,
        store: RunStore,
        *,
        resources: RunResources,
        lane: Lane,
        on_record: Callable[[CandidateRecord], None] = lambda r: None,
        on_start: Callable[[Candidate], None] = lambda c: None,
        plan: Optional[Plan] = None,
    ) -> None:
        self.problem = problem
        self.candidates = candidates
        self.device, self.store = device, store
        self.on_record, self.on_start = on_record, on_start
        self.resources, self.lane = resources, lane
        # a harness.parent.prebuild.BuildAhead already building these candidates, or None
        self.builds = self.resources.builds
        # the secret seeds and calls; None: a fresh one is drawn for the first candidate
        self.plan: Optional[Plan] = plan
        self._reference: Optional[ReferenceRecord] = None  # the reference's record, once its pass ran on this lane
        # the problem's settings, resolved once: every job message of this evaluation is built from them
        self.setting = Setting.of(problem, cfg, device, store, self.lane, self.resources.scratch, self.resources.quiet)
        self.cfg = self.setting.cfg
        self.stopped = threading.Event()  # stop() was called: nothing more is written, no process started
        # the lane's judge for this problem, started with the first candidate
        self.judge = LaneJudge(self.setting, self.stopped)
        self.reference_pass = ReferencePass(self.setting, self.judge, self.stopped)
        self.sanitizer = LaneSanitizer(
            self.cfg,
            device,
            {**self.lane.launcher.env, **self.lane.launcher.worker_env},
            self.lane.launcher.prestart and self.cfg.sanitizer.prestart,
            scratch=self.resources.scratch,
            quiet=self.resources.quiet,
            spares=self.lane.launcher.sanitizer_spares,  # the lane's: a run started ahead serves its next problem too
        )

    def screen(self) -> tuple[list[CandidateRecord], list[Candidate]]:
        """Records for candidates that cannot run here (written now), and the runnable rest."""
        records: list[CandidateRecord] = []
        runnable: list[Candidate] = []
        for candidate in self.candidates:
            skipped = self.prescreened(candidate)
            if skipped is None:
                runnable.append(candidate)
            else:
                records.append(skipped)
        return records, runnable

    def prescreened(self, candidate: Candidate) -> Optional[CandidateRecord]:
        """The record of a candidate that cannot run here (written now), else None."""
        skip = self._prescreen(candidate)
        if skip is None:
            return None
        self.on_start(candidate)
        return self._finish(self._failed(candidate, skip.status, skip.reason))

    def failed(self, candidate: Candidate, status: Status, reason: str) -> CandidateRecord:
        """The record of a candidate whose evaluation failed outside this one (an executor lost
        its lane), written now."""
        return self._finish(self._failed(candidate, status, reason))

    def run(self) -> list[CandidateRecord]:
        records, runnable = self.screen()
        try:
            records.extend(self.evaluate(candidate) for candidate in runnable)
        finally:
            self.close()
        return records

    def prepare(self) -> ReferenceRecord:
        """The reference's record on this lane, from its pass (its judge started) run once: before the first
        candidate, or earlier, while the lane waits for builds ahead."""
        if self._reference is None:
            self.plan = self.plan or Plan.fresh(self.cfg)
            with self.setting.gpu_shared():  # the null candidate's checks share the GPU; timings are alone
                self._reference = self.reference_pass.run(self.plan)
        return self._reference

    def evaluate(self, candidate: Candidate) -> CandidateRecord:
        """Evaluate one runnable candidate on this lane (its judge first, once) and write its record."""
        reference = self.prepare()
        self.on_start(candidate)
        self.sanitizer.prestart()  # memcheck's start-up under the tool overlaps this candidate's checks
        # the worker then loads the finished build; how the build ahead ended goes into the record
        ahead = self.builds.wait(candidate.path) if self.builds is not None else AheadBuild()
        if self.stopped.is_set():  # Ctrl-C after the reference: no judge restarted, no worker started
            raise Stopped(f"{candidate.name}: the run was stopped before its evaluation")
        if self.judge.ended() and reference.ok:
            reference = self._restart_judge()
        if not reference.ok:
            return self._finish(
                self._failed(candidate, Status.REFERENCE_FAILED, f"reference failed: {reference.outcome.reason}")
            )
        assert self.plan is not None  # drawn (or given) before the reference ran, and never dropped
        try:
            with self.setting.gpu_shared():  # checks and memcheck share the GPU; its timing is alone (gpu_alone)
                record = self._run_candidate(candidate, self.plan, reference)
        except JudgeFailed as exc:  # the judge, not the candidate, failed: the next candidate gets a new one
            self.judge.failed(str(exc))
            record = self._failed(
                candidate, Status.HARNESS_ERROR, f"the lane's judge failed during this candidate: {exc}"
            )
        except Exception as exc:  # a harness bug on one candidate must not end the run
            if self.stopped.is_set():  # what stop() ended (its worker refused, its judge killed) is no bug
                raise Stopped(f"{candidate.name}: the run was stopped during its evaluation") from None
            traceback.print_exc()
            record = self._failed(candidate, Status.HARNESS_ERROR, f"{type(exc).__name__}: {exc}")
        return self._finish(self._bounded(candidate, with_ahead(record, ahead)))

    def close(self) -> None:
        self.judge.end()
        self.sanitizer.close()
        self._reference = None

    # -- steps ---------------------------------------------------------------------------------

    def _prescreen(self, candidate: Candidate) -> Optional[Failure]:
        if candidate.extraction_failure is not None:
            return Failure(Status.EXTRACT_FAILED, candidate.extraction_failure)
        if self.device == Device.CPU:
            why = needs_cuda_statically(candidate.path)
            if why:
                return Failure(Status.NEEDS_CUDA, f"{why}; this run is on the CPU")
        return None

    def _restart_judge(self) -> ReferenceRecord:
        """A new judge after one failed; the reference's record keeps the first judge's measures."""
        assert self._reference is not None and self.plan is not None
        report = self.judge.restart(self.plan)
        if not report.ok:
            failed = dataclasses.replace(
                self._reference.outcome, ok=False, reason=f"the restarted judge failed: {report.reason}"
            )
            self._reference = dataclasses.replace(self._reference, outcome=failed)
        return self._reference

    def _run_candidate(self, candidate: Candidate, plan: Plan, reference: ReferenceRecord) -> CandidateRecord:
        assert self.judge.client is not None  # started with the reference, restarted after a failure
        parts = judge_candidate(
            self.setting,
            self.judge.client,
            plan,
            self.reference_pass.problem_timing,
            candidate,
            reference,
            self.judge.take_restart_note(),
            self.sanitizer,
        )
        return self._record(candidate, *parts)

    def _bounded(self, candidate: Candidate, record: CandidateRecord) -> CandidateRecord:
        """The record once the boundary is checked: with the hash layer, a candidate that wrote into
        a watched tree is `tampered` (what it wrote undone); a problem file changed on disk is a
        warning (the judge loaded the bytes pinned when the problem was found). A NameError of a
        name the problem file defines says so (`problem_global_hint`)."""
        watch = self.resources.boundary.watch
        changes = watch.check() if watch is not None else []
        foreign = self.store.foreign()
        changes += [foreign] if foreign else []
        if changes:
            more = f" and {len(changes) - 3} more (every one in the notes)" if len(changes) > 3 else ""
            failed = self._failed(
                candidate, Status.TAMPERED, f"wrote outside its scratch: {'; '.join(changes[:3])}{more}"
            )
            every = tuple(f"wrote outside its scratch: {change}" for change in changes) if more else ()
            return dataclasses.replace(failed, decision=dataclasses.replace(failed.decision, notes=every))
        hint = problem_global_hint(record.decision.reason, self.problem, self.cfg.check.problem_globals)
        if hint:
            record = dataclasses.replace(
                record, decision=dataclasses.replace(record.decision, reason=flat(f"{record.decision.reason} ({hint})"))
            )
        if self.problem.changed_on_disk():
            note = (
                f"the problem file {self.problem.path} changed on disk during the run; the bytes read when the run "
                "began were judged"
            )
            return dataclasses.replace(
                record, decision=dataclasses.replace(record.decision, warnings=(*record.decision.warnings, note))
            )
        return record

    def _failed(self, candidate: Candidate, status: Status, reason: str) -> CandidateRecord:
        return self._record(candidate, Decision(status, flat(reason)), Checks(), Timing(), Integrity(), Provenance())

    def _record(
        self,
        candidate: Candidate,
        decision: Decision,
        checks: Checks,
        timing: Timing,
        integrity: Integrity,
        provenance: Provenance,
    ) -> CandidateRecord:
        """The record of `candidate` on this lane: its identity, its parts, and where its log is, finished now."""
        log = self.store.log_path(self.problem.name, candidate.name)
        provenance = dataclasses.replace(
            provenance,
            log_path=str(log.relative_to(self.store.dir)) if log.exists() else "",
            finished_at=finished_now(),
        )
        return CandidateRecord(
            self.setting.identity(candidate.name, str(candidate.path), candidate.hash),
            decision,
            checks,
            timing,
            integrity,
            provenance,
        )

    def stop(self) -> None:
        """From another thread (a stopped run): end this lane's judge, workers and sanitizer runs
        now. Whatever they were doing writes no record: the candidate in flight raises Stopped instead."""
        self.stopped.set()
        self.judge.kill()
        self.sanitizer.kill()
        self.lane.launcher.kill_all()

    def _finish(self, record: CandidateRecord) -> CandidateRecord:
        if self.stopped.is_set():
            raise Stopped(f"{record.identity.candidate}: the run was stopped during its evaluation")
        self.store.append(record)
        self.on_record(record)
        return record


def with_ahead(record: CandidateRecord, ahead: AheadBuild) -> CandidateRecord:
    """The record with how its build ahead ended, and a warning when it did not spare the lane a compile,
    or when a cached build it would have loaded had been changed since it was built."""
    warnings = ahead_warnings(ahead, record.provenance.builds, record.decision.status)
    warnings += [
        f"the cached build of extension {b.name!r} was not loaded: {b.tampered}; it was built again from its "
        "sources (something wrote into the build cache)"
        for b in record.provenance.builds
        if b.tampered
    ]
    return dataclasses.replace(
        record,
        decision=dataclasses.replace(record.decision, warnings=(*record.decision.warnings, *warnings)),
        provenance=dataclasses.replace(record.provenance, ahead=ahead),
    )


NAME_ERROR = re.compile(r"NameError: name '([A-Za-z_][A-Za-z0-9_]*)' is not defined")


def problem_global_hint(reason: str, problem: Problem, shared: bool) -> str:
    """Why a candidate's NameError names something the problem file defines: its module does not
    share the problem's globals (check.problem_globals, which configs/kernelbench.yaml sets)."""
    found = NAME_ERROR.search(reason)
    if shared or found is None or found.group(1) not in problem.global_names:
        return ""
    return (
        f"{found.group(1)} is defined only in the problem file; a candidate's module does not see the problem's "
        "globals unless check.problem_globals is set, as configs/kernelbench.yaml does"
    )
