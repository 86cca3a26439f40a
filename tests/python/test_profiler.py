"""ag.profiler from Python, as torch.profiler: a context manager whose key_averages() has a row
per op forward and backward with torch's attributes, a table, a Chrome trace that json reads, and
record_function as a context manager and a decorator."""

import json

import pytest

import ag


def rows_by_key(prof):
    return {row.key: row for row in prof.key_averages()}


def test_forward_and_backward_rows_with_torch_attributes():
    a = ag.randn(8, 16, requires_grad=True)
    b = ag.randn(16, 4, requires_grad=True)
    with ag.profiler.profile() as prof:
        with ag.profiler.record_function("step"):
            ag.matmul(a, b).sum().backward()
    rows = rows_by_key(prof)
    for name in ("step", "matmul", "sum", "matmul_backward", "sum_backward"):
        assert name in rows
    assert rows["matmul"].count == 3  # the forward and the two products of its backward
    assert rows["step"].count == 1
    step = rows["step"]
    # Everything ran inside "step": the self times of all rows add up to its total.
    total_self = sum(row.self_cpu_time_total for row in prof.key_averages())
    assert total_self == pytest.approx(step.cpu_time_total, abs=1e-3)
    for row in prof.key_averages():
        assert 0 <= row.self_cpu_time_total <= row.cpu_time_total
        assert row.cpu_time == pytest.approx(row.cpu_time_total / row.count, abs=1e-3)
    assert rows["matmul"].cpu_memory_usage >= 8 * 4 * 4  # its output, float32
    assert step.cpu_time_total <= prof.wall_time_us


def test_table_and_chrome_trace(tmp_path):
    x = ag.randn(4, 4, requires_grad=True)

    @ag.profiler.record_function("decorated")
    def f(t, depth=1):
        return ag.matmul(t, t).sum() if depth == 0 else f(t, depth - 1)  # calls nest

    with ag.profiler.profile() as prof:
        f(x).backward()
    table = prof.key_averages().table(sort_by="count", row_limit=2)
    assert "Name" in table and "Self %" in table and "Profiled wall time" in table
    with pytest.raises(ag.ValueError, match="unknown sort key"):
        prof.key_averages().table(sort_by="duration")
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {e["name"] for e in complete}
    assert {"decorated", "matmul", "matmul_backward", "sum_backward"} <= names
    assert all(e["dur"] >= 0 and "ts" in e and "pid" in e and "tid" in e for e in complete)
    decorated = sorted((e["ts"], e["dur"]) for e in complete if e["name"] == "decorated")
    assert len(decorated) == 2  # the outer call, and the recursive one inside it
    (outer_ts, outer_dur), (inner_ts, inner_dur) = decorated
    assert outer_ts <= inner_ts and inner_ts + inner_dur <= outer_ts + outer_dur + 1e-3


def test_nothing_recorded_outside_and_one_profile_at_a_time():
    x = ag.randn(3, 3)
    with ag.profiler.profile() as prof:
        with pytest.raises(ag.ValueError, match="already recording"):
            with ag.profiler.profile():
                pass
    ag.matmul(x, x)  # after the profile: not recorded
    assert len(prof.key_averages()) == 0
    with pytest.raises(RuntimeError, match="nothing recorded yet"):
        ag.profiler.profile().key_averages()
