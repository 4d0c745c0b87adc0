"""Before the engine starts: each point's requests built into the on-disk prepare cache
(``prebuild``) and each point's workload description computed (``describe_ahead``), so no
observation window holds the harness's own building or describing."""

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
    """Before the engine starts: build each point's requests into the on-disk prepare cache,
    in the order the points will run, then put the prompt builder back where it was.  No
    observation window then holds the harness's own building: without this, the first config
    of an experiment paid (in its engine's window, so its cost) for the prompts every later
    config read from the cache.  Stops at a multi-turn workload (its later turns depend on
    replies, and so does the builder's state after it).  Returns the points built."""
    inputs = PointInputs.from_config(s.cfg)
    if not inputs.client.prepare_cache or inputs.client.prepare == "stream" or inputs.client.workers > 1:
        return 0
    from loadgen.client.dialect import RequestDialect

    start_state = s.builder.rng.bit_generator.state
    body = RequestDialect(s.client_cfg)
    built = 0
    try:
        for spec in specs:
            p = PointRun(spec=spec, run_dir=s.out, last=False, window_open_ns=0, inputs=inputs,
                         load=LoadSpec.from_load(spec.load))
            build_workload(s, p)
            if getattr(p.items, "followup", None) is not None:
                break
            p.progress = point_progress(s, p)
            opts = prepare_options(s, p, None)
            if opts.cache is None:
                break
            try:  # the workload's items are made as they are built: a bad one is the user's to fix
                Dispatcher(body, None, prepare=opts).prepare_only(p.items, p.load).close()
            except ValueError as e:
                raise UserError(str(e)) from None
            p.progress.close()
            built += 1
    finally:
        s.builder.rng.bit_generator.state = start_state
    return built



def describe_ahead(s: PointSession, specs: Iterable[RunSpec]) -> int:
    """Before the engine starts: each point's workload description (``workload.json``'s numbers) on
    the session, keyed by the point, and the figures (``workload.html``) of the first point written
    once into the session's folder, so the ``describe_workload`` step only writes a file (issue 43:
    describing took 1.8 s of a 4.75 s cost window, and varied with the host's load).  It needs only
    each point's workload table, not its built requests, so it runs wherever the prompt builder is
    ready (also with the prepare cache off, ``client.prepare=stream``, several workers or sessions);
    the builder's state is put back.  Returns the points described."""
    inputs = PointInputs.from_config(s.cfg)
    start_state = s.builder.rng.bit_generator.state
    done = 0
    try:
        for spec in specs:
            p = PointRun(spec=spec, run_dir=s.out, last=False, window_open_ns=0, inputs=inputs,
                         load=LoadSpec.from_load(spec.load))
            build_workload(s, p)
            figures_too = not s.workload_figures_written and not s.workload_descriptions
            try:
                stats, page = workload_describe.description(
                    s.cfg, n=p.load.requests_to_send, table=getattr(p.items, "table", None), count=s.builder.count,
                    figures_too=figures_too, load=spec.load)
            except ValueError as e:
                raise UserError(str(e)) from None
            if page is not None:
                s.out.mkdir(parents=True, exist_ok=True)
                workload_describe.write_figures(page, s.out)
            s.workload_descriptions[description_key(spec)] = WorkloadDescription(stats, figures=page is not None)
            done += 1
    finally:
        s.builder.rng.bit_generator.state = start_state
    return done
