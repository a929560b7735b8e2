"""Each setup's server build, found and checked before any dataset is loaded or server
started: config keys the build would refuse and plugins it cannot load stop a run here,
as does a setup that records without the recording shim."""

from __future__ import annotations

from mallocbench.errors import MallocbenchError
from mallocbench.native import shim_path
from mallocbench.run.experiment import Experiment, Setup
from mallocbench.servers.known_options import known_options, plugins_asked
from mallocbench.servers.mariadb import ServerBuild, find_build


def resolve_builds(experiment: Experiment) -> dict[str | None, ServerBuild]:
    builds: dict[str | None, ServerBuild] = {}
    for setup in experiment.setups:
        if setup.basedir not in builds:
            builds[setup.basedir] = find_build(setup.basedir)
        check_config_keys(experiment, setup, builds[setup.basedir])
    recording = [s.name for s in experiment.setups if s.record]
    if recording:
        try:
            shim_path()
        except MallocbenchError as exc:
            raise MallocbenchError(f"setup {recording[0]} has record = true, but {exc}") from None
    return builds


def check_config_keys(experiment: Experiment, setup: Setup, build: ServerBuild) -> None:
    """Refuse, before any dataset is loaded, a config key the setup's server would not
    take on one of the engines (each loads its own plugins), and a plugin it cannot load."""
    asked = {**experiment.server_config, **setup.config}
    for engine in experiment.engines:
        config = {**engine.config(experiment.dataset.cache_bytes), **asked}
        known = known_options(build, plugins_asked(config))
        if known is None:
            return
        if known.plugin_error is not None:
            raise MallocbenchError(
                f"setup {setup.name} on {engine.name}: {build.label} cannot load a plugin "
                f"the setup asks for ({known.plugin_error}): install it or remove it from "
                "plugin_load_add"
            )
        problems = [p for p in map(known.problem, asked) if p is not None]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise MallocbenchError(f"setup {setup.name} on {engine.name}: {problems[0]}{more}")
