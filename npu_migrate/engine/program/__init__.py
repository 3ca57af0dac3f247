"""The program model: what a file's code does (which code a value guards, where a value flows,
which attributes the code owns, which calls reach compiled CUDA code, whether the file already
keeps a path for the NPU). The engine's holds ask it (`model`); no rule or match kind is known
here. `run` reads what the files of one run decide for each other, from their results: a warm
run imports it without the model."""
