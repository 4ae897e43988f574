"""Trainyard's probe: measures a training script's memory and step time in its first steps.

The worker runs a job's command once as a probe, with this directory first on PYTHONPATH so that
Python imports this module at start-up, and with TRAINYARD_PROBE_REPORT naming a JSON file to
write. Without TRAINYARD_PROBE_REPORT the module does nothing but hand on to the sitecustomize it
shadows, if there is one.

With it, the module:

- writes the report at once, if it does not exist yet, so the worker knows a Python process
  started (``"python": true, "steps": 0``);
- hooks PyTorch's optimizers when (and only if) the script imports ``torch.optim.optimizer``:
  every optimizer class's ``step`` is wrapped the first time one of its instances is made, and
  only the outermost call counts, so a subclass calling ``super().step()`` counts once;
- after each step records the peak GPU memory (``torch.cuda.max_memory_reserved``, the largest
  over the devices) where CUDA is in use, the peak resident memory of the process, and the mean
  time between steps, and rewrites the report;
- ends the process (exit status 0, without running the rest of the script) once it has
  taken TRAINYARD_PROBE_MAX_STEPS steps (20 unless set), or once the peak (GPU memory on CUDA,
  else resident memory) has not grown for TRAINYARD_PROBE_PLATEAU_STEPS steps in a row (2 unless
  set) after at least two steps. The report then says ``"done": true`` and why: ``"maxSteps"``
  or ``"plateau"`` (``"plateau"`` where both hold at the same step).

The report always holds every field: ``python``, ``steps``, ``done``, ``reason``, ``device``
(``"cpu"`` or ``"cuda"``), ``peakVramBytes`` (null off CUDA), ``peakRssBytes``, ``stepMs`` (null
before the second step) and ``pid``. It is replaced atomically, so a reader never sees half of
one, and a script that fails part way leaves the figures of its last step with ``"done": false``.

Nothing the probe does raises into the script: its own failures are ignored, and the script's
own exceptions, those of ``step()`` included, pass through untouched.
"""
import os
import sys

_REPORT = os.environ.get("TRAINYARD_PROBE_REPORT")
_OPTIMIZER_MODULE = "torch.optim.optimizer"


def _chain_shadowed_sitecustomize():
    """Runs the sitecustomize that this one hides on sys.path, as Python would have without it."""
    from importlib.machinery import PathFinder

    here = os.path.dirname(os.path.realpath(__file__))
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return None
    # Made by hand: importlib.util.module_from_spec would cost more than the rest of this module.
    module = type(sys)(spec.name)
    module.__spec__ = spec
    module.__loader__ = spec.loader
    module.__file__ = spec.origin
    module.__cached__ = spec.cached
    spec.loader.exec_module(module)
    return module


def _positive_int(name, default):
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


class _Probe:
    """The figures so far, and what to do after each step."""

    def __init__(self, report, max_steps, plateau_steps):
        self.report = report
        self.max_steps = max_steps
        self.plateau_steps = plateau_steps
        self.steps = 0
        self.stale = 0
        self.best = None
        self.best_device = None
        self.device = "cpu"
        self.peak_vram = None
        self.first_end = None
        self.last_end = None

    def write(self, done=False, reason=None):
        import json
        import resource

        step_ms = None
        if self.steps >= 2:
            step_ms = (self.last_end - self.first_end) * 1000.0 / (self.steps - 1)
        body = json.dumps(
            {
                "python": True,
                "steps": self.steps,
                "done": done,
                "reason": reason,
                "device": self.device,
                "peakVramBytes": self.peak_vram,
                "peakRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "stepMs": step_ms,
                "pid": os.getpid(),
            }
        )
        temp = "%s.%d.tmp" % (self.report, os.getpid())
        try:
            with open(temp, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(temp, self.report)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise

    def _cuda_peak(self):
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        if cuda is None or not (cuda.is_initialized() and cuda.is_available()):
            return None
        return max(cuda.max_memory_reserved(d) for d in range(cuda.device_count()))

    def after_step(self, now):
        """Records a step that ended at `now`; the reason to stop, or None to go on."""
        self.steps += 1
        if self.first_end is None:
            self.first_end = now
        self.last_end = now
        try:
            self.peak_vram = self._cuda_peak()
        except Exception:
            self.peak_vram = None
        self.device = "cpu" if self.peak_vram is None else "cuda"
        if self.peak_vram is None:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        else:
            peak = self.peak_vram
        if self.best is None or self.best_device != self.device or peak > self.best:
            self.best = peak
            self.best_device = self.device
            self.stale = 0
        else:
            self.stale += 1
        if self.steps >= 2 and self.stale >= self.plateau_steps:
            return "plateau"
        if self.steps >= self.max_steps:
            return "maxSteps"
        return None


def _install(report):
    import functools
    import threading
    import time

    probe = _Probe(
        report,
        _positive_int("TRAINYARD_PROBE_MAX_STEPS", 20),
        _positive_int("TRAINYARD_PROBE_PLATEAU_STEPS", 2),
    )
    calls = threading.local()

    if not os.path.exists(report):
        try:
            probe.write()
        except Exception:
            pass

    def stop(reason):
        try:
            probe.write(done=True, reason=reason)
        except Exception:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    def counted(step):
        @functools.wraps(step)
        def wrapper(*args, **kwargs):
            depth = getattr(calls, "depth", 0)
            calls.depth = depth + 1
            try:
                result = step(*args, **kwargs)
            finally:
                calls.depth = depth
            if depth == 0:
                reason = None
                try:
                    reason = probe.after_step(time.perf_counter())
                    probe.write()
                except Exception:
                    pass
                if reason is not None:
                    stop(reason)
            return result

        # The mark names the wrapper itself: a copy functools.wraps makes of it elsewhere does
        # not pass for it.
        wrapper._trainyard_probe = wrapper
        return wrapper

    def hook_step(cls):
        step = getattr(cls, "step", None)
        if step is None or getattr(step, "_trainyard_probe", None) is step:
            return
        cls.step = counted(step)

    def patch(module):
        optimizer = module.Optimizer
        init = optimizer.__init__
        if getattr(init, "_trainyard_probe", None) is init:
            return

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
            try:
                hook_step(type(self))
            except Exception:
                pass

        __init__._trainyard_probe = __init__
        optimizer.__init__ = __init__

    class PatchingLoader:
        """The loader of torch.optim.optimizer, patching Optimizer once the module has run."""

        def __init__(self, loader, finder):
            self._loader = loader
            self._finder = finder

        def __getattr__(self, name):
            return getattr(self._loader, name)

        def create_module(self, spec):
            return self._loader.create_module(spec)

        def exec_module(self, module):
            self._loader.exec_module(module)
            try:
                patch(module)
                sys.meta_path.remove(self._finder)
            except Exception:
                pass

    class OptimizerFinder:
        """Finds torch.optim.optimizer as the other finders would, with a patching loader."""

        def find_spec(self, fullname, path=None, target=None):
            if fullname != _OPTIMIZER_MODULE:
                return None
            try:
                for finder in sys.meta_path:
                    find_spec = getattr(finder, "find_spec", None)
                    if finder is self or find_spec is None:
                        continue
                    spec = find_spec(fullname, path, target)
                    if spec is not None:
                        break
                else:
                    return None
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return None
                spec.loader = PatchingLoader(spec.loader, self)
                return spec
            except Exception:
                return None

    loaded = sys.modules.get(_OPTIMIZER_MODULE)
    if loaded is not None:
        patch(loaded)
    else:
        sys.meta_path.insert(0, OptimizerFinder())


if _REPORT:
    try:
        _install(_REPORT)
    except Exception:
        pass

try:
    _chained = _chain_shadowed_sitecustomize()
except Exception as err:
    if sys.flags.verbose:
        sys.excepthook(*sys.exc_info())
    else:
        sys.stderr.write(
            "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
            % (err.__class__.__name__, err)
        )
