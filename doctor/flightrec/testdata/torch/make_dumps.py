"""Writes two sets of hand-made PyTorch flight-recorder dumps (pickles).

dumps/nccl_trace_rank_{0,1,2}: flight-recorder dumps of three ranks in
the structure PyTorch's FlightRecorder::dump_dict pickles (schema 2.10),
with Python's pickle at protocol 2, the protocol PyTorch's pickler writes.

The story: ranks 0-2 broadcast (#1) and all_reduce (#2); rank 0 sends 16
floats to rank 1 (p2p); ranks 0 and 1 then enter all_reduce #3 and time
out, rank 2 never reaches it. Written by hand for goccl's tests because
the torch on the machine that made them (1.13) has no flight recorder;
TestTorchRealDump reads a dump of a real torch where one is installed.

tutorial/trace_{0,1}: the end-to-end example of PyTorch's tutorial "Flight
Recorder for Debugging Stuck Jobs" (pytorch/tutorials,
prototype_source/flight_recorder_tutorial.rst) in its version-2.5 form; see
tutorial() below.

    python3 make_dumps.py   (in this folder)
"""
import pickle

T0 = 1_700_000_000_000_000_000
PG = ("0", "default_pg")


def entry(rid, seq, p2p, name, insz, outsz, state, t, is_p2p=False, dtype="Float"):
    started = T0 + t + 1000 if state != "scheduled" else None
    completed = T0 + t + 5000 if state == "completed" else None
    e = {
        "frames": [{"name": "all_reduce", "filename": "train.py", "line": 42}],
        "record_id": rid,
        "pg_id": 0,
        "process_group": PG,
        "thread_name": "pt_main_thread",
        "thread_id": "140000000000000",
        "collective_seq_id": seq,
        "p2p_seq_id": p2p,
        "op_id": rid + 1,
        "profiling_name": name,
        "time_created_ns": T0 + t,
        "input_sizes": insz,
        "input_dtypes": [dtype] * len(insz),
        "output_sizes": outsz,
        "output_dtypes": [dtype] * len(outsz),
        "state": state,
        "time_discovered_started_ns": started,
        "time_discovered_completed_ns": completed,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": is_p2p,
    }
    if state == "completed":
        e["duration_ms"] = 0.004
    return e


def dump(rank):
    es = [
        entry(0, 1, 0, "nccl:broadcast", [[1024]], [[1024]], "completed", 0),
        entry(1, 2, 0, "nccl:all_reduce", [[4096]], [[4096]], "completed", 10_000),
    ]
    if rank == 0:
        es.append(entry(2, 2, 1, "nccl:send 0->1", [[16]], [[16]], "completed", 20_000, True))
    if rank == 1:
        es.append(entry(2, 2, 1, "nccl:recv 1<-0", [[16]], [[16]], "completed", 20_000, True))
    if rank in (0, 1):
        es.append(entry(3, 3, 1, "nccl:all_reduce", [[4096]], [[4096]], "started", 30_000))
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
        "comm_lib_version": "2.21.5",
        "pg_status": {"0": {"last_enqueued_collective": 3 if rank < 2 else 2,
                            "last_started_collective": 3 if rank < 2 else 2,
                            "last_completed_collective": 2}},
        "entries": es,
    }


for r in range(3):
    with open(f"dumps/nccl_trace_rank_{r}", "wb") as f:
        pickle.dump(dump(r), f, protocol=2)


# The tutorial prints one entry of an unpickled version-2.5 dump (from a
# PyTorch unit test): PUBLISHED is that entry, field for field. Its shape
# is what 2.5 writes without TORCH_NCCL_ENABLE_TIMING: no duration_ms,
# time_discovered_started_ns null (no start event, so no entry is ever
# "started": "scheduled" until the watchdog sees it "completed"), the
# process group a tuple, pg_config's ranks a string, no thread fields.
PUBLISHED = {
    "frames": [
        {"name": "test_short_pickle", "filename": "pytorch/test/distributed/test_c10d_nccl.py", "line": 3647},
        {"name": "spawn_main", "filename": ".conda/envs/pytorch-3.10/lib/python3.10/multiprocessing/spawn.py", "line": 116},
        {"name": "<module>", "filename": "<string>", "line": 1},
    ],
    "record_id": 0,
    "pg_id": 0,
    "process_group": ("0", "default_pg"),
    "collective_seq_id": 1,
    "p2p_seq_id": 0,
    "op_id": 1,
    "profiling_name": "nccl:all_reduce",
    "time_created_ns": 1724779239936775119,
    "input_sizes": [[3, 4]],
    "input_dtypes": ["Float"],
    "output_sizes": [[3, 4]],
    "output_dtypes": ["Float"],
    "state": "completed",
    "time_discovered_started_ns": None,
    "time_discovered_completed_ns": 1724779239975811724,
    "retired": True,
    "timeout_ms": 600000,
    "is_p2p": False,
}


def crash_entry(rank, seq, shape, done, line):
    """Collective seq of crash.py on rank, an all_reduce of a tensor of
    shape, in the published entry's form. The stack is the one the
    tutorial's output prints for the hung collective (crash.py:44), other
    lines of crash.py for the earlier calls; the times are made up, 50 ms
    apart (the published #1 took 39 ms, the communicator's setup). crash.py
    sets timeout=timedelta(seconds=1); the published entry keeps the unit
    test's 600000."""
    t = PUBLISHED["time_created_ns"] + rank * 1_000_000 + (seq - 1) * 50_000_000
    e = dict(PUBLISHED)
    e.update({
        "frames": [
            {"name": "all_reduce", "filename": "/home/cpio/local/pytorch/torch/distributed/distributed_c10d.py", "line": 2696},
            {"name": "wrapper", "filename": "/home/cpio/local/pytorch/torch/distributed/c10d_logger.py", "line": 83},
            {"name": "<module>", "filename": "/home/cpio/test/crash.py", "line": line},
        ],
        "record_id": seq - 1, "collective_seq_id": seq, "op_id": seq,
        "time_created_ns": t,
        "input_sizes": [list(shape)], "output_sizes": [list(shape)],
        "state": "completed" if done else "scheduled",
        "time_discovered_completed_ns": t + 2_000_000 if done else None,
        "retired": done, "timeout_ms": 1000,
    })
    return e


def tutorial(rank):
    """rank's dump of crash.py: every rank all_reduces a (3, 4) tensor
    twice (line 30); rank 0 alone all_reduces a (4, 5) one (line 36); every
    rank all_reduces the (3, 4) one twice more (line 44).

    collective_seq_id counts a rank's own collectives, so rank 0's extra
    call is its #3 while rank 1's #3 is its third (3, 4) call: rank 0's
    #4 and #5 are its last two (3, 4) calls and rank 1 stops at #4. NCCL
    pairs calls by their order and does not compare counts, so #3 (20
    floats against 12) and #4 are taken to pair up and complete on both
    ranks (the tutorial prints only #5's state); rank 0's #5 has no
    partner and stays "scheduled" until the 1 s timeout dumps both rings. That is why
    torchfrtrace reports "collective 5 at entry 4" (record_id 4 of rank
    0), "missing ranks: {1}" and rank 0's sizes, [[3, 4]]: it matches by
    collective_seq_id, not by the line of the program, and prints the
    entry of the first rank it holds. Its code (builder.py, types.py
    Op.match) also flags #3 first, rank 0's [[4, 5]] against rank 1's
    [[3, 4]] (SIZE_OR_SYNTAX_MISMATCH, "Culprit rank 1"); the tutorial
    shows only the lines of #5.
    """
    shapes = [(3, 4), (3, 4), (4, 5), (3, 4), (3, 4)] if rank == 0 else [(3, 4)] * 4
    lines = [30, 30, 36, 44, 44] if rank == 0 else [30, 30, 44, 44]
    es = [crash_entry(rank, i + 1, s, i < 4, lines[i]) for i, s in enumerate(shapes)]
    if rank == 0:
        es[0] = PUBLISHED
    last = len(es)
    return {
        "version": "2.5",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {"last_enqueued_collective": last,
                            "last_started_collective": -1,
                            "last_completed_collective": 4}},
        "entries": es,
    }


for r in range(2):
    with open(f"tutorial/trace_{r}", "wb") as f:
        pickle.dump(tutorial(r), f, protocol=2)
