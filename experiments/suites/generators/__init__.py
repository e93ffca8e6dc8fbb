"""Suite generators: BEAM-style conversations and tiered observations with known ground truth."""
