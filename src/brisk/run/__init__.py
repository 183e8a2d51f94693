"""One run's lifecycle, in the order brisk-train goes through it: `entry` (the entry point and the run id), `checks`
(what only this machine can say), `resume` (what a resume continues), `rundir` (the run directory and its record),
`builder` (Trainer, DataModule, model), `preflight` (folders, and room for a checkpoint of the built model), `ranks`
(TorchElastic starts a DDP job's ranks), `jobs` (a stop signal reaches the jobs a sweep runs in a launcher's
processes), `tune` (Lightning's finders instead of training) and `summary` (summary.json)."""
