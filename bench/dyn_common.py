"""What bench/dyn_batch.py and bench/dyn_seq.py share: one row of their tables
(one module for a range or a set of sizes against a static module per size)."""
import statistics


def row(lat, cpu, mem, key, use_cpu):
    """Medians of the dynamic and static runs at |key| (a batch or a length).

    Returns (dynamic ms, static ms, [dynamic CPU ms, static CPU ms, ratio] as
    text or '-', the ratio the goal is checked on (CPU time when measured,
    else wall), (arena, lower bound) of the dynamic run, (arena, lower bound)
    of the static one as printed)."""
    d = statistics.median(lat[("dyn", key)])
    st = statistics.median(lat[("static", key)])
    cells = ["-", "-", "-"]
    ratio = d / st
    if use_cpu:
        dc = statistics.median(cpu[("dyn", key)])
        sc = statistics.median(cpu[("static", key)])
        cells = [f"{dc:.2f}", f"{sc:.2f}", f"{dc / sc:.3f}"]
        ratio = dc / sc
    return d, st, cells, ratio, mem[("dyn", key)], mem[("static", key)]
