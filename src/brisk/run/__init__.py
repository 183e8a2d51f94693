"""One run's lifecycle, in the order brisk-train goes through it: `checks` (the config's values), `resume`
(what a resume continues), `rundir` (the run directory and its record), `builder` (Trainer, DataModule, model),
`preflight` (disk, folders and data before the first step), `launch` (the other ranks of a DDP job),
`tune` (Lightning's finders instead of training) and `summary` (summary.json)."""
