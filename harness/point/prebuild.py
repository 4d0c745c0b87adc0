"""Before the engine starts: each point's workload built once, described (``workload.json``'s
numbers, and the first point's figures) and its requests built into the on-disk prepare cache, so
no observation window holds the harness's own building or describing."""

from __future__ import annotations

from collections.abc import Iterable

from conf.load_point import RunSpec
from harness import workload_describe
from harness.errors import UserError
from harness.point.dispatch import point_progress, prepare_options
from harness.point.inputs import PointInputs
from harness.point.point_run import PointRun
from harness.point.session import PointSession
from harness.point.steps import WorkloadDescription, build_workload, description_key
from loadgen.dispatch import Dispatcher, LoadSpec


def prebuild(s: PointSession, specs: Iterable[RunSpec]) -> int:
    """Before the engine starts, in the order the points will run, one pass that builds each point's
    workload once and then

    - describes it: ``workload.json``'s numbers on the session, keyed by the point, and the first
      point's figures (``workload.html``) written once into the session's folder, so the
      ``describe_workload`` step only writes a file (issue 43: describing took 1.8 s of a 4.75 s cost
      window, and varied with the host's load).  It needs only the workload's table, so every point
      is described, also with the prepare cache off, ``client.prepare=stream`` or several workers;
    - builds its requests into the on-disk prepare cache: without this, the first config of an
      experiment paid (in its engine's window, so its cost) for the prompts every later config read
      from the cache.  Preparing stops at a multi-turn workload (its later turns depend on replies,
      and so does the builder's state after it); the points after it are still described.

    A point is described before its requests are built (they consume its items); each is built from
    the builder's state after the previous point's requests, as when the points run.  The builder is
    put back where it was.  Returns the points whose requests were built."""
    inputs = PointInputs.from_config(s.cfg)
    c = inputs.client
    preparing = c.prepare_cache and c.prepare != "stream" and c.workers <= 1
    body = None
    if preparing:
        from loadgen.client.dialect import RequestDialect

        body = RequestDialect(s.client_cfg)
    start_state = s.builder.rng.bit_generator.state
    built = 0
    try:
        for spec in specs:
            p = PointRun(spec=spec, run_dir=s.out, last=False, window_open_ns=0, inputs=inputs,
                         load=LoadSpec.from_load(spec.load))
            build_workload(s, p)
            describe(s, p)
            preparing = preparing and _prepare(s, p, body)
            built += preparing
    finally:
        s.builder.rng.bit_generator.state = start_state
    return built


def describe(s: PointSession, p: PointRun) -> None:
    """The point's workload description (``WorkloadDescription``) on the session, from its built items'
    table; the figures of the first point described, written into the session's folder."""
    figures_too = not s.workload_figures_written and not s.workload_descriptions
    try:
        stats, page = workload_describe.description(
            s.cfg, n=p.load.requests_to_send, table=getattr(p.items, "table", None), count=s.builder.count,
            figures_too=figures_too, load=p.spec.load)
    except ValueError as e:
        raise UserError(str(e)) from None
    if page is not None:
        s.out.mkdir(parents=True, exist_ok=True)
        workload_describe.write_figures(page, s.out)
    s.workload_descriptions[description_key(p.spec)] = WorkloadDescription(stats, figures=page is not None)


def _prepare(s: PointSession, p: PointRun, body) -> bool:
    """The point's requests built into the prepare cache; False where they cannot be (a multi-turn
    workload, no cache for it), which ends the preparing for the points after it."""
    if getattr(p.items, "followup", None) is not None:
        return False
    p.progress = point_progress(s, p)
    opts = prepare_options(s, p, None)
    if opts.cache is None:
        p.progress.close()
        return False
    try:  # the workload's items are made as they are built: a bad one is the user's to fix
        Dispatcher(body, None, prepare=opts).prepare_only(p.items, p.load).close()
    except ValueError as e:
        raise UserError(str(e)) from None
    p.progress.close()
    return True
