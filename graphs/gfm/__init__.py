"""The graph foundation model (GFM): config, network, training and checkpoints.

Import the submodules (`graphs.gfm.model`, `graphs.gfm.train`); this package itself loads no torch.
"""

from graphs.gfm.config import GFMConfig, paper_config, small_config

__all__ = ["GFMConfig", "paper_config", "small_config"]
