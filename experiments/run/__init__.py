"""One run, start to finish: compose the config, check it, build the pipeline, retrieve, write the run
folder. The app (`memeval-run`, `python -m experiments.run`) is app.py, its steps in order; compose.py
finds and composes the Hydra configs (conf/, shipped as experiments.conf); config_check.py refuses a bad
config before any work and build.py builds the pipeline once; resume.py skips a job whose finished run
exists; outputs.py writes the run folder (its format: experiments/run_folder/) and console.py what a run
prints. The suite comes from experiments/suites/load.py; evaluation (experiments/evaluate/) and tracking
(experiments/track/) come after it in the flow.
"""
