"""IC003: the model can switch top-k reuse on but offers no way to compact the buffer."""

import torch.nn as nn


class MultiTokenPredictor(nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def set_skip_topk(self, skip: bool) -> None:
        for layer in self.layers:
            layer.indexer.skip_topk = skip
