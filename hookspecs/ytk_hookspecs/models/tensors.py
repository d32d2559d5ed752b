"""Tensor descriptions shared by every stage."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["DTYPES", "TensorInfo"]


#: dtype names used everywhere in ytk files (numpy-style spelling).
DTYPES = ("float16", "float32", "bfloat16", "int64", "int32", "int8", "uint8", "bool")


class TensorInfo(BaseModel):
    """A named tensor: concrete dims are ints, symbolic ones are strings."""

    model_config = ConfigDict(extra="forbid")

    name: str
    shape: list[int | str]
    dtype: str

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            if not isinstance(d, int):
                raise ValueError(f"{self.name} has a symbolic dim {d!r}")
            n *= d
        return n
