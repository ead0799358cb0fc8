"""Run fuzzing properties with hypothesis; write a reproducer per failure.

``run_property(prop, examples=N, seed=S, out_dir=D)`` runs ``prop``'s check
on ``N`` generated examples (hypothesis shrinks every distinct failure), and
writes each shrunk failure to ``D`` as a standalone script
(``dynamo_dist.fuzzing.reproducer``). Used by ``python -m dynamo_dist fuzz``.
"""

from __future__ import annotations

import collections
import contextlib
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from hypothesis import given, reject, settings
from hypothesis import seed as hypothesis_seed

from .properties import InvalidExample, Property, gloo_pool
from .reproducer import write_reproducer
from .strategies import LONG_PROFILE, register_profiles

_EXAMPLE_ATTR = "_dynamo_dist_fuzz_example"


@dataclass
class Failure:
    """One distinct, shrunk failure."""

    property: str
    example: Any
    error: str
    reproducer: Path | None = None


# The outcome of a check call that returns nothing, that rejects its example,
# and that fails.
PASSED, INVALID, FAILED = "passed", "discarded", "failed"


@dataclass
class PropertyReport:
    """``outcomes``: every check call's outcome (shrinking included): what
    the check returned (a property with finer outcomes, ``stock``'s), else
    ``PASSED``; ``INVALID`` or ``FAILED``. ``notes``: per outcome, the
    notes the check returned with it (``stock``: stock's failure), counted."""

    name: str
    calls: int = 0  # check calls, shrinking included
    passed: int = 0
    invalid: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    interrupted: bool = False
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    notes: dict[str, collections.Counter] = field(default_factory=dict)

    def record(self, outcome: Any) -> None:
        """Count what a check returned: None, an outcome, or ``(outcome, note)``."""
        outcome, note = outcome if isinstance(outcome, tuple) else (outcome, None)
        outcome = outcome or PASSED
        self.outcomes[outcome] += 1
        if note:
            self.notes.setdefault(outcome, collections.Counter())[note] += 1


Progress = Callable[[PropertyReport, int], None]


def _leaf_errors(e: BaseException) -> Iterator[BaseException]:
    inner = getattr(e, "exceptions", None)  # an exception group (3.11+, or hypothesis' backport)
    if isinstance(inner, (list, tuple)) and inner:
        for one in inner:
            yield from _leaf_errors(one)
    else:
        yield e


def run_property(
    prop: Property,
    *,
    examples: int,
    seed: int | None = None,
    out_dir: str | Path | None = None,
    progress: Progress | None = None,
    check: Callable[[Any], None] | None = None,
) -> PropertyReport:
    """Check ``prop`` on ``examples`` generated examples.

    ``seed`` pins hypothesis' randomness (None: random); ``check`` overrides
    the property's own check (it must be importable as ``prop.check`` for
    the reproducer to use it). Every distinct failure is shrunk, and written
    to ``out_dir`` as ``<property>_<n>.py`` when given.
    """


    report = PropertyReport(prop.name)
    check = check or prop.check_function()

    def test(example: Any) -> None:
        report.calls += 1
        try:
            outcome = check(example)
        except InvalidExample:
            report.invalid += 1
            report.record(INVALID)
            reject()
        except KeyboardInterrupt:  # the run stopped (its time limit): not the example's failure
            raise
        except BaseException as e:
            report.record(FAILED)
            setattr(e, _EXAMPLE_ATTR, example)
            raise
        else:
            report.passed += 1
            report.record(outcome)
        finally:
            if progress:
                progress(report, examples)

    register_profiles()
    wrapped = settings(settings.get_profile(LONG_PROFILE), max_examples=examples, report_multiple_bugs=True)(
        given(prop.strategy())(test)
    )
    if seed is not None:
        wrapped = hypothesis_seed(seed)(wrapped)
    start = time.monotonic()
    context = gloo_pool() if prop.gloo else contextlib.nullcontext()
    try:
        with context:
            wrapped()
    except KeyboardInterrupt:
        report.interrupted = True
    except BaseException as outer:
        for e in _leaf_errors(outer):
            example = getattr(e, _EXAMPLE_ATTR, None)
            error = "".join(traceback.format_exception_only(type(e), e)).strip()
            if example is None:  # an error outside the check (e.g. in generation)
                error = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            report.failures.append(Failure(prop.name, example, error))
    report.seconds = time.monotonic() - start
    if out_dir is not None:
        for n, failure in enumerate(report.failures, 1):
            if failure.example is not None:
                failure.reproducer = write_reproducer(
                    Path(out_dir) / f"{prop.name}_{n}.py", prop.name, prop.check, failure.example,
                    failure.error, seed,
                )
    return report
