"""Generic report sections any study plan can name (the ones answering one study's own question are in
experiments/study/questions/); each module registers its sections on import.

Every module of this package is imported by `experiments.study.sections.available_sections()`, so a
new section is a new file here with `@register_section("name")` (see experiments/study/sections.py).
"""
