"""No positional encoding: the control.  Only the causal mask tells positions apart."""

from posexp.encodings.base import PositionalEncoding


class NoPE(PositionalEncoding):
    pass
