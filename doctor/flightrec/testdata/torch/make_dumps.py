"""Writes dumps/nccl_trace_rank_{0,1,2}: flight-recorder dumps of three ranks in
the structure PyTorch's FlightRecorder::dump_dict pickles (schema 2.10),
with Python's pickle at protocol 2, the protocol PyTorch's pickler writes.

The story: ranks 0-2 broadcast (#1) and all_reduce (#2); rank 0 sends 16
floats to rank 1 (p2p); ranks 0 and 1 then enter all_reduce #3 and time
out, rank 2 never reaches it. Written by hand for goccl's tests because
the torch on the machine that made them (1.13) has no flight recorder;
TestTorchRealDump reads a dump of a real torch where one is installed.

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
