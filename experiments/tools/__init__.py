"""Repository tools: keeping the generated parts of README.md and docs/ in sync with reports/."""
