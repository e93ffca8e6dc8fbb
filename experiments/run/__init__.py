"""One run, start to finish: the app (`memeval-run`, `python -m experiments.run`) is app.py, its steps in
order. The config it runs is composed, checked and built by experiments/configure/ (compose.py, check.py,
build.py); resume.py skips a job whose finished run exists; outputs.py writes the run folder (its format:
experiments/run_folder/), console.py what a run prints, phase_lines.py its phases, resources.py peak memory
and phase times. The suite comes from experiments/suites/load.py; evaluation (experiments/evaluate/) and
tracking (experiments/track/) come after it in the flow.
"""
