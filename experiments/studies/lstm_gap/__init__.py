"""What closes a group-state language model's gap to the LSTM: a state that forgets, depth, heads,
and the published orthogonal RNN (expRNN) beside them. The screen (``screen``) first."""
