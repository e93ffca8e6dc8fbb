"""Report sections that answer one study's own question (EXP-05's tagging and boost, the spark25 phases,
the cross-encoder, the stage reports): each named only by the plans of that question. The generic
sections any plan can use are in experiments/study/sections/. Every module of both packages registers
its sections on import (experiments.study.sections.available_sections).
"""
