"""memeval's Hydra configs: data, shipped inside the package so installed console scripts find them."""
