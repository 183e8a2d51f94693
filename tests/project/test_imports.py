"""A run loads only what it uses: each registry's index names the module that registers each shipped name, and a
default synthetic run imports only the modules listed here (no image-folder code, no timm, Muon, pruning, search or
comparison). Both run in a fresh interpreter: this one has imported whatever the other tests used."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from brisk import registry
from helpers import TINY

# What `brisk-train data=synthetic` imports of brisk: the entry point, the run's steps, the synthetic data, the
# default net, optimizer and schedule, the always-on and default callbacks. A module added here is one more that
# every run pays for.
ALLOWED = [
    "brisk",
    "brisk.callbacks",
    "brisk.callbacks.checkpoint",
    "brisk.callbacks.divergence_guard",
    "brisk.callbacks.model_summary",
    "brisk.callbacks.progress_bar",
    "brisk.callbacks.rank_seed",
    "brisk.callbacks.resume_state",
    "brisk.callbacks.run_plots",
    "brisk.callbacks.run_start",
    "brisk.callbacks.sigterm_checkpoint",
    "brisk.callbacks.speed_meter",
    "brisk.callbacks.startup_clock",
    "brisk.checkpoints",
    "brisk.checkpoints.io",
    "brisk.checkpoints.paths",
    "brisk.cli",
    "brisk.compat",
    "brisk.conf",
    "brisk.data",
    "brisk.data.augment",
    "brisk.data.augment_ops",
    "brisk.data.base",
    "brisk.data.checks",
    "brisk.data.cifar",
    "brisk.data.cifar_files",
    "brisk.data.loader",
    "brisk.data.splits",
    "brisk.data.synthetic",
    "brisk.errors",
    "brisk.fastloop",
    "brisk.models",
    "brisk.models.build",
    "brisk.models.classifier",
    "brisk.models.from_data",
    "brisk.models.losses",
    "brisk.models.metrics",
    "brisk.models.nets",
    "brisk.models.nets.simple_cnn",
    "brisk.models.param_groups",
    "brisk.models.sparsity",
    "brisk.optim",
    "brisk.optim.schedules",
    "brisk.registry",
    "brisk.run",
    "brisk.run.builder",
    "brisk.run.checks",
    "brisk.run.devices",
    "brisk.run.entry",
    "brisk.run.loggers",
    "brisk.run.precision",
    "brisk.run.preflight",
    "brisk.run.resume",
    "brisk.run.rundir",
    "brisk.run.schemas",
    "brisk.run.summary",
    "brisk.search",
    "brisk.train",
    "brisk.utils",
    "brisk.utils.config",
    "brisk.utils.files",
    "brisk.utils.lazy",
    "brisk.utils.quiet",
    "brisk.utils.ranks",
    "brisk.utils.run_files",
    "brisk.utils.threads",
]

RUN_AND_LIST = """
import atexit, json, os, sys
atexit.register(lambda: open(os.environ["MODULES_OUT"], "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "brisk-train"
from brisk.train import main
main()
"""

SHIPPED_NAMES = """
import json
from brisk import registry
found = {r.name: [sorted(r.names()), sorted(r.shipped)] for r in (*registry.SINGLE, *registry.GROUPS,
         registry.PROFILERS, registry.AUGMENTS)}
print(json.dumps(found))
"""


def test_a_default_synthetic_run_imports_only_the_modules_it_uses(project):
    out = project / "modules.json"
    env = {**os.environ, "BRISK_ROOT": str(project), "MODULES_OUT": str(out)}
    # Fewer batches of TINY's data (cached by the tests before): the modules a run imports do not depend on how many
    # batches it trains, so long as it logs (6 steps >= log_every_n_steps=5), validates and tests. With the data
    # cached, 16.6-18.3 s -> 11.2-13.8 s; the process stays a fresh interpreter, whose sys.modules is what is checked.
    limits = ["trainer.limit_train_batches=6", "trainer.limit_val_batches=1", "trainer.limit_test_batches=1"]
    args = [*TINY, "trainer.max_epochs=1", "callbacks.progress_bar=null", *limits]
    proc = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded = [m for m in json.loads(out.read_text()) if m == "brisk" or m.startswith("brisk.")]
    assert sorted(set(loaded) - set(ALLOWED)) == [], "a default run imports modules it does not use"
    assert "brisk.models.nets.simple_cnn" in loaded  # the run did build its net


def test_each_registry_index_names_every_shipped_entry():
    """Fresh: every name the home packages register is in the index, and nothing else is."""
    proc = subprocess.run([sys.executable, "-c", SHIPPED_NAMES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name, (registered, indexed) in json.loads(proc.stdout).items():
        assert registered == indexed, f"{name}: registered {registered}, indexed {indexed}"


def test_the_index_names_the_module_that_defines_each_entry():
    """brisk's own classes register where they are defined; those brisk does not own, in a home package."""
    for reg in (*registry.SINGLE, *registry.GROUPS, registry.PROFILERS, registry.AUGMENTS):
        for name, module in reg.shipped.items():
            where = reg.get(name).__module__
            assert where == module or (not where.startswith("brisk.") and module in reg.home), (reg.name, name)
