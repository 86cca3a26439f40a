"""ag.profiler: where the time goes, op by op, as torch.profiler (python/src/profiler.cpp binds
autograd/profiler.h; docs/profiler.md).

    with ag.profiler.profile() as prof:
        with ag.profiler.record_function("forward"):
            loss = model(x).sum()
        loss.backward()
    print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")      # chrome://tracing or https://ui.perfetto.dev

Every op's forward is a row under its name ("matmul"), every op's backward under "<op>_backward"
("matmul_backward"), every record_function under its own. Self time leaves out the scopes inside,
so the self column adds up to the time the scopes cover; the line under the table says what share
of the profiled wall time that is. key_averages() is a list of rows with torch's attributes: key,
count, self_cpu_time_total, cpu_time_total and cpu_time (µs), cpu_memory_usage and
self_cpu_memory_usage (bytes asked of the allocator).

Only the thread that entered the profile records, and one profile records at a time (ValueError
otherwise). torch.profiler.profile's arguments (activities, schedule, record_shapes, ...) are not
taken: ag profiles the CPU, every op, with bytes.
"""

from . import _C

_profiler = _C._profiler


class _KeyAverages(list):
    """key_averages(): the rows, one per name, and table() as torch's EventList.table()."""

    def __init__(self, events):
        super().__init__(events.rows())
        self._events = events

    def table(self, sort_by="cpu_time_total", row_limit=100):
        """The table sorted (descending) by sort_by: cpu_time_total, self_cpu_time_total, count,
        cpu_memory_usage, self_cpu_memory_usage (or ag's total, self, calls, bytes, self_bytes);
        at most row_limit rows (all with row_limit=-1)."""
        return self._events.table("total" if sort_by is None else sort_by, row_limit)


class profile:
    """Records the ops run inside `with ag.profiler.profile() as prof:` (torch.profiler.profile)."""

    def __init__(self):
        self._profile = None

    def __enter__(self):
        self._profile = _profiler.Profile()
        return self

    def __exit__(self, *exc):
        self._profile.stop()
        return False

    def _recorded(self):
        if self._profile is None:
            raise RuntimeError("profile: nothing recorded yet; use it as `with ag.profiler.profile():`")
        return self._profile

    def key_averages(self):
        return _KeyAverages(self._recorded().key_averages())

    def export_chrome_trace(self, path):
        self._recorded().export_chrome_trace(str(path))

    @property
    def wall_time_us(self):
        return self._recorded().wall_time_us


class record_function:
    """A scope of your own in the table and the trace (torch.profiler.record_function):
    `with ag.profiler.record_function("attention"):`; also a decorator."""

    def __init__(self, name):
        self._name = str(name)
        self._scope = _profiler.RecordFunction(self._name)

    def __enter__(self):
        self._scope.enter()
        return self

    def __exit__(self, *exc):
        self._scope.exit()
        return False

    def __call__(self, fn):
        import functools

        name = self._name

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            scope = _profiler.RecordFunction(name)  # one per call: a recursive call nests
            scope.enter()
            try:
                return fn(*args, **kwargs)
            finally:
                scope.exit()

        return wrapped
