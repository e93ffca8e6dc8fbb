"""Domain report sections a study plan can name; each module registers its sections on import.

Every module of this package is imported by `experiments.study.sections.available_sections()`, so a
new section is a new file here with `@register_section("name")` (see experiments/study/sections.py).
"""
