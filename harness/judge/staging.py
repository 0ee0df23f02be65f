"""The judge's sessions with compared workers (harness.judge.service): the two regions each worker is
given and what the judge stages in them.

A session's inputs region holds the reference's weights, the problem's init inputs and the
input-set slots (slot 0 for the checked calls, all of them for the timing sets); its mailbox holds
the outputs of one step. `Stager` owns the sessions and their regions, writes each call's inputs
into a slot, keeps the judge's own copy of what it staged, and checks that the worker left the
staged inputs, and the guard bands after them, as they were.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional

import torch

from harness.core import protocol as P
from harness.core.config import Device
from harness.core.status import Status
from harness.device.failures import WorkerFailure
from harness.device.inputs import same_bits
from harness.device.regions import Region, aligned, guard_broken, layout, past_end, view, write
from harness.device.setup import synchronize
from harness.judge.reference import Reference, release, tensors_of


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What a session's regions hold, fixed once the reference has run through the plan."""

    region_kind: str  # a RegionKind: cuda, device memory another process can map; host, host shared memory
    set_bytes: int  # the largest input set of the plan: one slot
    mailbox_bytes: int  # the largest step's outputs
    timed_slots: int  # input-set slots in a session's inputs region


class SessionState:
    """One compared worker's session: its regions, where it is in the plan, and what is staged."""

    def __init__(self, number: int, role: P.Role, inputs: Region, mailbox: Region, slots: list[int]) -> None:
        self.number = number
        self.role = role
        self.inputs = inputs
        self.mailbox = mailbox
        self.slots = slots  # offset of each input-set slot in `inputs`
        self.next_call = 0
        self.seen: list[str] = []
        self.pristine: Optional[list[Any]] = None  # the judge's own copy of what is staged in slot 0
        self.pristine_trial: Optional[int] = None
        self.in_slot: Optional[int] = None  # the trial whose inputs slot 0 holds
        self.in_slot_args: tuple[P.Arg, ...] = ()
        self.last_args: Optional[list[Any]] = None  # the inputs the reference's last call ran on
        self.last_trial: Optional[int] = None
        self.timer: Any = None  # the reference's side of this session's paired timing (harness.device.timing.Timer)
        # the worker keeps its same-seed weights: its calls are judged against the initial ones
        self.own_weights = False
        # the first gradient draw's mismatch, when a second draw was asked for (Checker._gradients)
        self.first_gradients: Optional[tuple[str, str]] = None

    def free(self) -> None:
        """Free both regions."""
        self.inputs.free()
        self.mailbox.free()


class Stager:
    """The judge's sessions, their regions, and the inputs staged in them."""

    def __init__(self, job: P.JudgeJob, reference: Reference, footprint: Footprint) -> None:
        self.job = job
        self.reference = reference
        self.footprint = footprint
        self.device = reference.device
        self.sessions: dict[int, SessionState] = {}
        self._count = 0

    def open(self, role: P.Role) -> P.SessionHandle:
        """A new session: its regions, the weights and init inputs written, the first inputs staged."""
        reference, footprint = self.reference, self.footprint
        self._count += 1
        weights = [(k, v) for k, v in reference.randomized.items()]
        weight_specs, weights_end = layout([v for _, v in weights])
        end = layout(tensors_of(reference.init_args), weights_end)[1]
        slot_size = aligned(footprint.set_bytes)
        slots = [aligned(end) + k * slot_size for k in range(footprint.timed_slots)]
        inputs = Region.allocate(aligned(end) + slot_size * footprint.timed_slots, self.device, footprint.region_kind)
        try:
            mailbox = Region.allocate(footprint.mailbox_bytes, self.device, footprint.region_kind)
        except BaseException:
            inputs.free()
            raise
        session = SessionState(self._count, role, inputs, mailbox, slots)
        self.sessions[session.number] = session
        write(inputs.tensor, [v for _, v in weights], weight_specs)
        init = self._write_set(session, reference.init_args, weights_end, "get_init_inputs()")
        first = self.stage(
            session, P.Want(P.WantKind.TRIAL) if role is not P.Role.BASELINE else P.Want(P.WantKind.CALL)
        )
        reference.load(reference.randomized)
        synchronize(self.device)
        assert first is not None
        return P.SessionHandle(
            session.number,
            inputs.handle,
            mailbox.handle,
            init,
            tuple(P.Named(k, s) for (k, _), s in zip(weights, weight_specs)),
            first,
        )

    def close(self, number: int) -> P.Closed:
        """End a session: its regions freed (a session not open is closed already)."""
        session = self.sessions.pop(number, None)
        if session is not None:
            session.pristine = None
            session.timer = None
            session.free()
        release(self.device)
        return P.Closed(number)

    def stage(self, session: SessionState, want: P.Want) -> Optional[P.Staged]:
        """Stage what the worker asks for next (a trial's or a call's inputs in slot 0, or every
        timing set); None when it asks for something the plan does not have."""
        if want.kind == P.WantKind.NONE:
            return P.Staged(())
        if want.kind == P.WantKind.TIMING:
            session.in_slot = None
            sets = []
            for k, offset in enumerate(session.slots):
                sets.append(self._write_set(session, self.reference.inputs(k), offset))
            session.pristine, session.pristine_trial = None, None
            return P.Staged(tuple(sets))
        if want.kind == P.WantKind.CALL:
            if not 0 <= want.index < len(self.job.calls):
                return None
            trial = self.job.calls[want.index].input
        elif want.kind == P.WantKind.TRIAL and 0 <= want.index < len(self.job.input_seeds):
            trial = want.index
        else:
            return None
        if session.in_slot == trial:
            # The slot still holds this trial's inputs (the judge or the worker checked that forward
            # left them alone): nothing to write, and a worker on device copies need not copy again.
            session.pristine, session.pristine_trial = self._inputs_again(session, trial), trial
            return P.Staged((session.in_slot_args,), fresh=False)
        args = self.reference.inputs(trial)
        staged = self._write_set(session, args, session.slots[0])
        session.pristine, session.pristine_trial = args, trial
        session.in_slot, session.in_slot_args = trial, staged
        return P.Staged((staged,))

    def _inputs_again(self, session: SessionState, trial: int) -> list[Any]:
        """The judge's own copy of a trial's inputs once more. On the CPU, making them is the
        costly part of a step: the copy the reference just used is kept when it is still bit for
        bit what the slot holds (the reference may write into its inputs). On a GPU, make them again."""
        used = session.last_args
        session.last_args = None
        if self.device.type == Device.CPU and used is not None and session.last_trial == trial:
            slot = [view(session.inputs.tensor, spec) for spec in layout(tensors_of(used), session.slots[0])[0]]
            if all(same_bits(mine, theirs) for mine, theirs in zip(tensors_of(used), slot)):
                return used
        return self.reference.inputs(trial)

    def _write_set(
        self, session: SessionState, args: list[Any], offset: int, where: str = "get_inputs()"
    ) -> tuple[P.Arg, ...]:
        """Write `args`' tensors into the worker's inputs region from `offset`; their Args."""
        tensors = tensors_of(args)
        specs, _ = layout(tensors, offset)
        write(session.inputs.tensor, tensors, specs)
        found = iter(specs)
        return tuple(
            P.Arg(tensor=next(found)) if isinstance(a, torch.Tensor) else P.Arg(value=_json_value(a, where))
            for a in args
        )

    def staged_inputs(self, session: SessionState, trial: int) -> list[Any]:
        """The judge's own copy of what it staged for this call (made afresh if it was not kept)."""
        if session.pristine is not None and session.pristine_trial == trial:
            args = session.pristine
        else:
            args = self.reference.inputs(trial)
        session.pristine, session.pristine_trial = None, None  # the reference's call may write into it
        return args

    @property
    def worker_copies(self) -> bool:
        """Whether workers compute on device copies of a host region, which the judge cannot see."""
        return self.footprint.region_kind == P.RegionKind.HOST and self.device.type == Device.CUDA

    def mutated(self, session: SessionState, args: list[Any], label: str) -> Optional[P.StepAnswer]:
        """The worker's copy of the inputs must still hold what the judge staged. (A worker on a
        CUDA device with a host region computes on device copies the judge cannot see; it checks
        them itself.)"""
        if self.worker_copies:
            return None
        staged = [view(session.inputs.tensor, spec) for spec in layout(tensors_of(args), session.slots[0])[0]]
        for position, (mine, theirs) in enumerate(zip(tensors_of(args), staged)):
            if not same_bits(mine, theirs):
                return P.StepAnswer(
                    failure=P.Failure(Status.MUTATED_INPUT, f"forward changed input {position} in place ({label})")
                )
        return None

    def guards(self, session: SessionState, args: list[Any], label: str) -> str:
        """Why the guard band after one of the worker's inputs no longer holds its poison (a write
        past the input's end), or "". Not kept where the worker computes on device copies."""
        if self.worker_copies or not self.job.guard_bands:
            return ""
        broken = guard_broken(session.inputs.tensor, layout(tensors_of(args), session.slots[0])[0])
        return past_end(*broken, label) if broken is not None else ""


def _json_value(value: Any, where: str) -> Any:
    """`value` when JSON can carry it to a worker; an interface error otherwise."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise WorkerFailure(
            Status.INTERFACE_ERROR,
            f"{where} returns a {type(value).__name__}, which the harness cannot hand to workers (tensors and JSON "
            "values only)",
        ) from None
    return value
