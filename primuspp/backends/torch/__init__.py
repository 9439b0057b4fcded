"""Plain-torch backend: user nn.Module stages and a tiny GPT."""
