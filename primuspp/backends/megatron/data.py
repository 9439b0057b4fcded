"""Token streams for `primuspp train`: byte-level, deterministic, addressable by position (for resume).

A stream is a sequence of training sequences of `seq_len + 1` tokens (inputs and next-token labels);
sequence `i` depends only on the stream and `i`, so a run restarted at position `i` sees exactly what the
uninterrupted run saw.

- `SyntheticStream`: a learnable pattern: words drawn at random from a small fixed vocabulary of words
  (made from the seed), separated by spaces. Within a word the next byte is determined by the ones before,
  so a small model's loss falls quickly from ln(256) toward the entropy of the word choices.
- `TextStream`: consecutive windows of a file's bytes (wrapping around at the end).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import torch

from primuspp.errors import ConfigError
from primuspp.inputs import read_bytes

#: largest --data corpus read (it is held in memory whole, one byte a token)
MAX_CORPUS_BYTES = 1 << 30

Microbatch = tuple[torch.Tensor, torch.Tensor]


class SyntheticStream:
    def __init__(self, seq_len: int, seed: int = 0, words: int = 24) -> None:
        self.seq_len = seq_len
        self.seed = seed
        rng = random.Random(10_007 + seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        self.words = [
            [ord(rng.choice(letters)) for _ in range(rng.randint(3, 7))] + [ord(" ")] for _ in range(words)
        ]

    def sequence(self, index: int) -> torch.Tensor:
        rng = random.Random(self.seed * 1_000_003 + index)
        need = self.seq_len + 1
        out: list[int] = []
        while len(out) < need:
            out += rng.choice(self.words)
        return torch.tensor(out[:need])


class TextStream:
    def __init__(self, path: str | Path, seq_len: int) -> None:
        path = Path(path)
        data = read_bytes(path, "--data", MAX_CORPUS_BYTES)  # a regular file only: a FIFO never blocks
        if len(data) < seq_len + 1:
            raise ConfigError(
                f"--data {path}: {len(data)} bytes, fewer than one sequence ({seq_len + 1} bytes)", key="data"
            )
        self.seq_len = seq_len
        self.tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()

    def sequence(self, index: int) -> torch.Tensor:
        n = len(self.tokens)
        start = (index * self.seq_len) % n
        idx = torch.arange(start, start + self.seq_len + 1) % n
        return self.tokens[idx]


def make_stream(seq_len: int, seed: int = 0, path: str | Path | None = None) -> SyntheticStream | TextStream:
    return TextStream(path, seq_len) if path is not None else SyntheticStream(seq_len, seed)


class StepData:
    """One step's microbatches, made on first use (only the ranks holding the first or last stage read
    data) and shared by the chunks of a rank."""

    def __init__(
        self,
        stream: SyntheticStream | TextStream,
        position: int,
        num_microbatches: int,
        micro_batch_size: int,
    ) -> None:
        self.stream, self.position = stream, position
        self.num_microbatches, self.micro_batch_size = num_microbatches, micro_batch_size
        self._made: dict[int, Microbatch] = {}

    def __getitem__(self, k: int) -> Microbatch:
        item = self._made.get(k)
        if item is None:
            start = self.position + k * self.micro_batch_size
            seqs = torch.stack([self.stream.sequence(start + j) for j in range(self.micro_batch_size)])
            item = self._made[k] = (seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous())
        return item

    def iterator(self) -> Iterator[Microbatch]:
        return (self[k] for k in range(self.num_microbatches))

    @property
    def end(self) -> int:
        """The stream position after this step."""
        return self.position + self.num_microbatches * self.micro_batch_size
