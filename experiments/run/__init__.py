"""One run, start to finish: compose the config, check it, build the pipeline, retrieve, write the run
folder. The app (`memeval-run`, `python -m experiments.run`) is app.py; compose.py finds and composes
the Hydra configs (conf/, shipped as experiments.conf); config_check.py refuses a bad config before any
work; resume.py skips a job whose finished run exists; ranking.py, trec.py and float_text.py write the
run folder's ranking.csv and run.trec. Evaluation (experiments/evaluate/) and tracking
(experiments/track/) come after it in the flow.
"""
