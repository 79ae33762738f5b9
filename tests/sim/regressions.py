"""Regression seeds: each schedule once showed a real bug, now fixed; the violation must not return.

(seed, minutes, jobs per schedule, a violation text that must not appear, the bug). A seed's
schedule is a function of the simulator's version too: when the workload generator changes, re-find
the seed (`git show <fix>^` of services/run.py, then `python -m tests.sim`) and update it here.

Seed 5 found the early tick of a pause (fixed in services/run.py, unit-tested in
tests/unit/services/test_pause_early_tick.py); since workflow tasks also time out after their write,
seed 5 showed the same loss through a worker whose clock runs ahead (skew): fixed in
services/schedule.py (the resume sends the imminent handed-over ticks of the pause again), unit-tested
beside the first. Not a regression seed: with the record fix below, seed 5's schedule no longer
reaches that race (reverting the resume fix alone leaves it clean), so it could not fail; the unit
test is the guard.

Seed 90 (3 minutes) found a fast-path record lost to a 500: the run that executed was written
SKIPPED by its redelivery (fixed in services/run.py, Worker._record; tests/unit/services/
test_worker_record_faults.py). The strict xfails of test_workflows.py (Rearm and DeadLetter retried
after a timeout that followed their write) are fixed in asl.py and pass there.

Seeds 6, 7, 8 (issue 19, crash point run.after_handler): tests/unit/services/
test_worker_crash_after_handler.py and tests/integration/test_crashes.py guard the same mechanisms.
Seeds 155, 163 (the count): tests/unit/services/test_worker_in_flight_runs.py, the contract suite;
seeds 48, 24: test_worker_crash_after_handler.py; seed 174: test_worker_stale_reads.py; seed 9:
test_worker_in_flight_runs.py; seeds 28, 49: test_worker_stalled_handler.py; seeds 82, 4:
test_worker_crash_after_handler.py; seeds 230, 2140, 767, 5309: test_pause_edit.py; seeds 1260, 49
(stuck FAILED): test_worker_first_beat_attempt.py; seed 603: test_worker_crash_after_handler.py and the
contract suite (the displaced holder); seeds 2486, 533: test_worker_crash_after_handler.py; seeds 3707,
1370: test_worker_in_flight_runs.py; seeds 8765, 83: test_worker_crash_after_handler.py; seeds 6925,
5109, 6879 (and 5924): test_worker_spare_copies.py; seeds 4, 6 of RUN_CANCEL_SEEDS (a run
cancel over a run that executed): test_run_cancel_lapsed_lease.py; seed 80 of RUN_CANCEL_SEEDS (a
receive that started under a run cancel answered 200): test_run_cancel_races_a_start.py and the
contract suite (JobStore.cancel_run); seed 110: test_pause_early_tick.py; seed 2973:
test_worker_record_faults.py; seed 3369 of RUN_CANCEL_SEEDS: test_worker_crash_after_handler.py;
seeds 128, 137, 530 of KEY_SEEDS (a started run's key wait): test_worker_crash_after_handler.py;
seed 273 of RUN_CANCEL_SEEDS: test_pause_early_tick.py; seed 83 of KEY_SEEDS: test_worker_spare_copies.py;
seed 165 of KEY_SEEDS: test_run_cancel_races_a_start.py; seeds 890, 5024, 5479, 6968, 7217 of KEY_SEEDS
(a finished run's waiting copies): test_concurrency_keys.py and the contract suite (RunStore.note_wait);
seeds 2521, 5050 of KEY_SEEDS (a kept start with no message): test_worker_revive_kept_start.py;
seed 6505 of KEY_SEEDS (a first beat's lease write timed out after it applied):
test_run_cancel_first_beat_timeout.py;
seed 5225 of KEY_SEEDS (an edit's records of the overdue ticks it took off the schedule): test_pause_edit.py;
seed 7098 of KEY_SEEDS (a resume's copies of the ticks a worker ahead took for ones of the pause):
test_pause_early_tick.py and tests/unit/test_plan_ticks.py; seed 5797 of KEY_SEEDS (a key wait that could
not keep its run's start): test_worker_crash_after_handler.py.
"""

from __future__ import annotations

REGRESSION_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        1, 5, 10, "stuck FAILED",
        "fast path: a stale read of a re-armed retry handed attempt 1 over again; no workflow started",
    ),
    (
        90, 3, 10, "2026-11-30T12:00:30.000Z is SKIPPED but its handler succeeded",
        "fast path: the record write answered a 500 after the handler ran; the redelivery skipped the run",
    ),
    (
        7, 5, 10, "2026-11-30T12:08:00.000Z is CANCELLED but its handler succeeded",
        "a worker died after the handler (run.after_handler); a cancel went through once its slot lapsed,"
        " and the redelivery wrote the run that executed CANCELLED (now LOST: Worker._lost_to_cancel)",
    ),
    (
        8, 5, 10, "2026-11-30T12:01:45.000Z is SKIPPED but its handler succeeded",
        "a worker died after the handler; the next tick took its lapsed slot, and the redelivery, meeting"
        " it there, wrote the run SKIPPED 'overlap' (now the taker keeps its start on its row)",
    ),
    (
        6, 5, 10, "2026-11-30T12:01:15.000Z is CANCELLED but its handler succeeded",
        "leased path: died after the handler, its RUNNING row's slot taken by the next tick, the job"
        " cancelled; the redelivery swept RUNNING -> PENDING -> CANCELLED (now it re-enters: LOST)",
    ),
    (
        155, 5, 10, "cancel still refused",
        "a counted (allow) run's worker died mid-run: the bare count never went back to zero, and the"
        " job's live runs renewed its lease, so no cancel went through (now one in_flight entry per run)",
    ),
    (
        163, 5, 10, "cancel still refused",
        "as seed 155 (and its run stuck LEASED behind the refused cancels)",
    ),
    (
        48, 5, 10, "stuck FAILED",
        "a failure recorded, the worker dead before the hand-over, the job cancelled: the redelivery saw"
        " its start marker, found the row not claimable and dropped itself (now _refused hands it over)",
    ),
    (
        174, 5, 10, "stuck FAILED",
        "fast path: a replayed run read stale showed the series before it; its failure was handed over"
        " under that series' execution name, a no-op (now the record's row gives the replays)",
    ),
    (
        24, 5, 10, "overlapped under overlap policy skip",
        "SQS handed one message out twice at once: the twin took its live hold for a dead receive's,"
        " ran beside it, and freed the slot while it ran (now a live hold of its own message: left)",
    ),
    (
        9, 5, 10, "is CANCELLED but its handler succeeded",
        "a counted (backfill) run and a leased RUNNING run whose workers died after the handler, the job"
        " cancelled since: the redeliveries wrote CANCELLED (now LOST: the in_flight entry, the RUNNING row)",
    ),
    (
        28, 5, 10, "2026-11-30T12:02:50.000Z is SKIPPED but its handler succeeded",
        "fast path: a handler stalled past its leases (no heartbeat); its redelivery met the next tick in"
        " the slot and wrote it SKIPPED, refusing its outcome (now its record replaces: UNSTARTED_RECORDS)",
    ),
    (
        49, 5, 10, "2026-11-30T12:07:45.000Z is CANCELLED but its handler succeeded",
        "as seed 28, a cancel found the stalled run idle and wrote it CANCELLED",
    ),
    (
        82, 5, 10, "2026-11-30T12:02:40.000Z is SKIPPED but its handler succeeded",
        "a worker died after the handler; a later tick took its lapsed slot (its start marker), and the"
        " redelivery, the schedule edited since, wrote it SKIPPED 'rescheduled' (now: as seed 8)",
    ),
    (
        4, 5, 10, "2026-11-30T12:01:00.000Z stuck FAILED",
        "a failure recorded, the worker dead before the hand-over, a later tick in its slot, the job"
        " cancelled: the redelivery took the run for one that never started (now _cancelled hands it over)",
    ),
    (
        293, 5, 10, "stuck PENDING",
        "a replay's ReplayRearm applied and its answer timed out: the retried write, refused, ended Stale"
        " and nothing was sent (now the retry accepts its own row, as Rearm does)",
    ),
    (
        230, 5, 10, "was due and is missing",
        "an edit during a pause: the resume decides the pause's ticks over the new schedule, and the old"
        " schedule's ticks of the pause kept no row (now the edit records them SKIPPED 'rescheduled')",
    ),
    (
        86, 5, 10, "overlapped under overlap policy buffer_one",
        "a duplicate delivery of a finished tick read its row stale (absent), took the free slot and ran"
        " the handler again; the next tick, seeing the holder's row finished, started beside it (now a"
        " run that holds the slot reads its row consistently)",
    ),
    (
        139, 5, 10, "overlapped under overlap policy buffer_one",
        "a tick's late original message, past the starting deadline, wrote it SKIPPED while its wake-up"
        " copy ran it on the fast path; the next tick took the slot, the holder's row 'never started'"
        " (now such a row is no proof the holder is over: its hold decides)",
    ),
    (
        213, 5, 10, "was due and is missing",
        "an edit of the schedule while the dispatcher was behind restarted the schedule at the edit: the"
        " old schedule's ticks due before it, not handed over yet, kept no row (now the new schedule's"
        " are handed over late, by the catch-up policy, and the rest recorded SKIPPED 'rescheduled')",
    ),
    (
        355, 5, 10, "was due and is missing",
        "an edit during a pause whose write applied and whose answer timed out: the 503 skipped the"
        " SKIPPED records of the old schedule's ticks of the pause, and a retry found nothing to change"
        " (now the write is read back and, applied, the edit goes on)",
    ),
    (
        319, 5, 10, "2026-11-30T12:01:30.000Z is SKIPPED but its handler succeeded",
        "an allow run's receive died after its fast-path handler; the next receive of its message met a"
        " throttle and gave its in-flight entry back, the only trace that the run started; the receive"
        " after that met its starting deadline as a fresh tick (now a started run's marker is never"
        " given back)",
    ),
    (
        1708, 5, 10, "2026-11-30T12:01:30.000Z is SKIPPED but its handler succeeded",
        "the same for a buffer_one run's slot: the throttled redelivery of a run whose fast-path"
        " handler had run gave the slot back, and the next tick's run took it; the receive after that"
        " found the slot taken and recorded the run SKIPPED (now a started run's hold is kept)",
    ),
    (
        1260, 5, 10, "2026-11-30T12:02:34.370Z stuck FAILED",
        "fast path: a retry read stale (absent) ran past its first beat, whose lease write counted attempt"
        " 2; its failure was handed over as attempt 1, a no-op by name (now the lease write's attempt)",
    ),
    (
        49, 5, 10, "2026-11-30T12:06:50.000Z stuck FAILED",
        "fast path: two copies of a run; one's failure re-armed it while the other's handler ran, whose"
        " first beat then leased it as attempt 2 and handed its failure over as attempt 1 (now: as 1260)",
    ),
    (
        3707, 5, 10, "2026-11-30T11:59:00.000Z is CANCELLED but its handler succeeded",
        "backfill runs (rows written PENDING) whose workers died after the handler; a cancel went through"
        " once their in-flight entries lapsed and its sweep wrote the PENDING rows CANCELLED (now a run"
        " with a start marker left on the job is spared: its redelivery records it LOST)",
    ),
    (
        1370, 5, 10, "2026-11-30T12:03:50.000Z is CANCELLED but its handler succeeded",
        "as seed 3707, for a retry's re-armed PENDING row whose second attempt's worker died after the"
        " handler",
    ),
    (
        8765, 5, 10, "2026-11-30T12:03:10.000Z is CANCELLED but its handler succeeded",
        "a worker died after its fast-path handler, its redelivery after the claim (LEASED), and a later"
        " tick took the slot where its start marker was; after a cancel, the redelivery wrote the LEASED"
        " row CANCELLED (now LOST: a claim got past the gate, Worker._cancelled)",
    ),
    (
        83, 5, 10, "2026-11-30T12:02:00.000Z is CANCELLED but its handler succeeded",
        "as seed 8765, the LEASED row a takeover of a stalled fast-path holder's RUNNING row (its start"
        " kept by the tick that took its slot), the takeover gone before its start",
    ),
    (
        2140, 5, 10, "2026-11-30T12:03:50.000Z was due and is missing",
        "an edit during a pause whose write applied and whose SKIPPED records of the old schedule's"
        " ticks of the pause met a 500 after the first two: the rest kept no row, the old schedule gone"
        " (now the job keeps those ticks until the resume, which records them again first)",
    ),
    (
        767, 5, 10, "2026-11-30T12:02:40.000Z was due and is missing",
        "an edit's hand-over failed after its write, and the job was paused before the next pass: the"
        " pause kept its tick due before it, never handed over, for a resume that never came (now the"
        " pause hands over the ticks due before it first)",
    ),
    (
        603, 5, 10, "2026-11-30T12:01:30.000Z is SKIPPED but its handler succeeded",
        "a worker died after its fast-path handler; a later tick took its lapsed slot and its hold's"
        " answer timed out, so nothing kept the dead run's start; its redelivery met the taker's live"
        " hold and wrote it SKIPPED (now the taking write records the holder it displaced)",
    ),
    (
        2486, 5, 10, "2026-11-30T12:03:30.000Z is SKIPPED but its handler succeeded",
        "a worker died after its fast-path handler; the tick's second message took the lapsed slot its"
        " first had held and, the schedule edited since, wrote the run SKIPPED 'rescheduled' (now"
        " another message's marker of the run proves its start)",
    ),
    (
        533, 5, 10, "2026-11-30T12:02:20.000Z is SKIPPED but its handler succeeded",
        "as seed 2486 for a counted (allow) run: another message's lapsed in-flight entry of the run",
    ),
    (
        6925, 5, 10, "2026-11-30T12:02:10.000Z stuck RUNNING",
        "a late receive of a message deleted already ran the re-armed retry in the slot and died; the"
        " retry's message met its live marker and was acknowledged as a spare: no message was left"
        " (now a spare leaves a copy delayed past the hold: Worker._spare)",
    ),
    (
        5109, 5, 10, "2026-11-30T12:01:00.000Z stuck LEASED",
        "the same through a row lease: a late receive claimed the lapsed lease and died; the run's last"
        " message met its live lease and was dropped as a duplicate (now: as 6925)",
    ),
    (
        6879, 5, 10, "one-off ended LEASED",
        "a claim applied and answered a timeout, its slot given back, the job cancelled; the redelivery"
        " (its clock behind) met its own live lease, and acknowledged CANCELLED a run left LEASED (now"
        " it is left to its visibility, and its next receive cancels the run)",
    ),
    (
        5309, 5, 10, "2026-11-30T12:02:30.000Z was due and is missing",
        "a resume re-planned its pause from the pause's first tick and its hand-over met a throttle"
        " before the stamp; a later edit, overdue from there, started the new schedule after the newest"
        " run row (a tick handed over before the pause): its ticks of the pause had no row (now an edit"
        " with overdue ticks starts at the oldest of them)",
    ),
    (
        110, 5, 10, "2026-11-30T12:04:40.000Z is SKIPPED but its handler succeeded",
        "a worker ahead ran a tick just before the pause and died after its handler; the resume"
        " re-planned the pause and wrote that tick SKIPPED 'coalesced', and its redelivery met the row"
        " as a finished run (now a catch-up skips no tick with a start marker on the job)",
    ),
    (
        2973, 5, 10, "2026-11-30T12:04:55.055Z stuck PENDING",
        "a hand-over wrote a one-off's PENDING row and failed before its send; the cancel cleared"
        " next_run_at, its sweep's write was throttled and the client got a 503, never retried (now"
        " the sweep retries each row's write, and goes on to the next)",
    ),
]  # fmt: skip

# Seeds found with the client's run cancels in the workload (simulate(run_cancels=True), the default
# since they came): the run cancels shift a seed's schedule from the first one that changes a run, so
# REGRESSION_SEEDS above, found before them, replay without them (run_cancels=False).
RUN_CANCEL_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        4, 5, 10, "2026-11-30T12:04:40.000Z is CANCELLED but its handler succeeded",
        "a run cancel (POST /api/runs/{id}/cancel) of a RUNNING run whose worker died after its handler,"
        " its lease lapsed, wrote it CANCELLED (now marked: its redelivery records it LOST)",
    ),
    (
        6, 5, 10, "2026-11-30T12:02:00.000Z is CANCELLED but its handler succeeded",
        "a run cancel of a run held under a lapsed lease, whose handler had run, wrote it CANCELLED",
    ),
    (
        3369, 5, 10, "2026-11-30T12:03:00.000Z is SKIPPED but its handler succeeded",
        "a worker died after its fast-path handler; the tick that took its slot failed twice to keep its"
        " start on its row, and the next takeover, its answer lost, overwrote the displaced record: the"
        " redelivery found no marker and wrote SKIPPED (now the taker gives the slot back and waits)",
    ),
    (
        80, 5, 10, "run 2026-11-30T12:04:50.000Z started at 291.50 after a run cancel answered CANCELLED",
        "a run cancel found no start marker and wrote the re-armed PENDING row CANCELLED, while the"
        " retry's receive counted itself and read the row stale: both now meet on the job item",
    ),
    (
        273, 5, 10, "2026-11-30T12:04:00.000Z is SKIPPED but its handler succeeded",
        "a worker ahead ran a tick just before the pause and died after its handler; an edit during the"
        " pause recorded the old schedule's ticks of the pause SKIPPED 'rescheduled', that one too, and"
        " its redelivery met the row as a finished run (now a tick with a start marker is left to it)",
    ),
]  # fmt: skip

# Found with concurrency keys and priorities in the workload (simulate(keys=True), with run
# cancels): each replays with both; the seeds above replay without keys (their schedules drew none).
KEY_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        128, 5, 10, "2026-11-30T12:03:20.000Z is SKIPPED but its handler succeeded",
        "a fast-path run's worker died after its handler; its redelivery found the key full and waited"
        " in a delayed copy, a new message that met no marker of its own and, the schedule edited, wrote"
        " the run SKIPPED (now the wait keeps a started run's start on its row first)",
    ),
    (
        137, 5, 10, "2026-11-30T12:03:00.000Z is CANCELLED but its handler succeeded",
        "as seed 128, a run cancel during the key wait: the PENDING row written CANCELLED over a run"
        " that executed",
    ),
    (
        530, 5, 10, "2026-11-30T12:03:00.000Z is CANCELLED but its handler succeeded",
        "as seed 137",
    ),
    (
        83, 5, 10, "2026-11-30T12:02:40.000Z is SKIPPED but its handler succeeded",
        "a receive on a clock behind met the live slot marker of another message of its run (a copy"
        " that ran the handler and died); the starting deadline, asked before the slot, wrote SKIPPED"
        " over that run (now a live marker of another message makes the receive a spare first)",
    ),
    (
        165, 5, 10, "upstreams succeeded, dependant is without a run",
        "a one-off upstream asked to stop by a run cancel succeeded, and its worker died before settling;"
        " the redelivery, its marker refused by the cancel, answered CANCELLED and settled nothing (now"
        " a recorded run is settled, as any duplicate of it settles it)",
    ),
    (
        890, 5, 10, "stuck PENDING",
        "a key of limit 1 held by 30 s handlers of a job ticking every 10 s: its backlog drained past"
        " the drain's fixed half hour, slowed further as a finished run's waiting copies waited on while"
        " the key stayed full. Now the drain runs while handlers run (workload.py DRAIN_LIMIT_SECONDS),"
        " and a finished run's copy is spare (RunStore.note_wait answers None); the latter is guarded by"
        " test_concurrency_keys.py and the contract suite, not by this seed",
    ),
    (5024, 5, 10, "stuck PENDING", "as seed 890"),
    (5479, 5, 10, "the schedule did not settle", "as seed 890"),
    (6968, 5, 10, "the schedule did not settle", "as seed 890"),
    (7217, 5, 10, "the schedule did not settle", "as seed 890"),
    (
        2521, 5, 10, "stuck RUNNING",
        "a paused tick's message handed out twice: one receive stopped at the pause and acknowledged it,"
        " the other's hold outlived it (its release failed); a later tick took the lapsed slot over and"
        " kept the tick's start on its row, RUNNING with no message left to move it (now the kept start"
        " gets a delayed copy of the holder's message: Worker._revive)",
    ),
    (5050, 5, 10, "stuck RUNNING", "as seed 2521, the other hold's answer timed out after its write"),
    (
        6505, 5, 10, "is CANCELLED (a run cancel at 294.20) but its attempt 1 ran unrecorded",
        "a fast-path run's first beat wrote its lease row and the answer timed out; the beat's second try,"
        " refused by that row (RUNNING under its own lease), was read as another holder's: the worker let"
        " the lease go, its record was refused, the takeover ran attempt 2, and a run cancel of the"
        " re-armed retry wrote CANCELLED over attempt 1 that ran unrecorded (now a row RUNNING under the"
        " attempt's own lease is its own write's: recorded under it)",
    ),
    (
        5225, 5, 10, "2026-11-30T12:02:30.000Z was due and is missing",
        "a pause handed over its due tick and failed before its stamp; an edit 55 s later found the old"
        " schedule's ticks due and not handed over, and its SKIPPED 'rescheduled' records of those off"
        " the new schedule, written after its write, met a timeout: the rest had no row for good (now"
        " the edit hands them over first, as the next pass would have, and a worker records them)",
    ),
    (
        7098, 5, 10, "2026-11-30T12:04:30.000Z was due and is missing",
        "a worker whose clock ran ahead acknowledged a handed-over tick as one of the pause; the resume's"
        " copy of it, sent in a step after its hand-over's stamp, met a throttle (now the copies go out"
        " in the resume's hand-over, before its stamp, which stays at the pause's first tick if it fails)",
    ),
    (
        5797, 5, 10, "2026-11-30T12:02:50.000Z is CANCELLED but its handler succeeded",
        "an allow run's worker died after its handler; its redelivery found the key full, failed to keep"
        " the start on the row (both tries), waited anyway and dropped its in-flight entry, the one proof:"
        " the job's cancel wrote CANCELLED over the run (now the receive leaves the message, marker kept)",
    ),
    (
        8077, 5, 10, "stuck RUNNING",
        "found in a first fix of seed 890 that let one copy carry a run's wait (the row's count named"
        " the current copy, and an overtaken copy was dropped): a twin receive counted a wait, its send"
        " failed, and its message was acknowledged by the other twin, so the count named a copy that was"
        " never sent and every real copy was dropped. Taken back: each wait leaves its own copy",
    ),
]  # fmt: skip

# Found with targets and ECS runs in the workload (simulate(targets=True), the default since they
# came, with run cancels and keys): each replays with all three. "" stands for any violation: these
# schedules raised out of the loop (a test fails on the raise itself) rather than broke an invariant.
TARGET_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        14, 5, 10, "",
        "a run's own task's ctx.heartbeat() read the run's cancel mark, and a 500 on that read raised"
        " into the handler (now the beat logs it and keeps the mark it had: the next beat reads again)",
    ),
    (29, 5, 10, "", "as seed 14"),
    (
        225, 10, 12, "of a non-idempotent job succeeded twice",
        "a run's own task of an idempotent: false job died after its handler (TaskLost), and the job's"
        " policy retried it: the handler succeeded twice (now such an attempt is dead-lettered)",
    ),
    (
        9173, 5, 10, "2026-11-30T12:03:00.000Z was due and is missing",
        "SQS handed a tick of a pause out twice: one receive stopped at the pause and acknowledged it, the"
        " other counted the run on the job and failed; the resume's catch-up left the tick to a"
        " redelivery (its marker said it may have run) that could not come (now a lapsed marker's tick"
        " gets a copy of its message from the pass that skips it)",
    ),
    (
        9402, 5, 10, "2026-11-30T12:02:00.000Z was due and is missing",
        "the checker's: a job created 0.2 ms after a tick's second was expected to run that tick",
    ),
    (
        2, 5, 10, "still SCHEDULED after its run ended SUCCEEDED",
        "a worker died between a one-off run's success record and its job's COMPLETED write; the"
        " redelivery found the run recorded and left the job SCHEDULED for good (the checker did not"
        " look at a one-off's job: tests/e2e/test_restart.py found it; now _refused settles the success)",
    ),
    (
        383, 5, 10, "still SCHEDULED after its run ended SUCCEEDED",
        "as seed 2, another way: the settle's read of the job failed (a 500) after the record, and the"
        " redelivery met its concurrency key full and dropped itself as spare, the run being over (now"
        " every copy that finds its run recorded settles it: Worker._settle_found)",
    ),
    (697, 5, 10, "still SCHEDULED after its run ended SUCCEEDED", "as seed 383"),
    (
        184, 10, 12, "did not settle",
        "the simulator's client, not the scheduler: six tries of a create got no answer, but the first"
        " had applied; the client never knew its recurring job, never stopped it, and the queue never"
        " emptied (now the client tries its unanswered creates again once the faults stop)",
    ),
]  # fmt: skip

# Found with batches of packed one-offs in the workload (simulate(packs=True), the default since): seeds
# that showed a bug of the packed path, or of the copy-out that ends it, replayed on that workload.
PACK_SEEDS: list[tuple[int, float, int, str, str]] = [
    (
        107, 5, 10, "still SCHEDULED after its run ended SUCCEEDED",
        "a packed job copied out while its run ran (a run cancel); the run's record timed out after it"
        " applied, and the retry's refusal answered the row after the record, not the one before it:"
        " the worker read no 'materialized' flag and left the copied-out job SCHEDULED (now either row's"
        " flag counts: run._flagged)",
    ),
    (226, 5, 10, "still SCHEDULED after its run ended SUCCEEDED", "as seed 107"),
    (
        352, 5, 10, "after its run ended SUCCEEDED",
        "not the packed path's own: a one-off paused after its tick was due still runs it (as documented),"
        " and its success left the job PAUSED, then SCHEDULED for good after the resume (dag.settle"
        " completed a SCHEDULED job only; the failure workflow's FailJob the same). Found once the"
        " workload paused one-offs (its batches' jobs); now a PAUSED one-off completes (or fails) too",
    ),
]  # fmt: skip
