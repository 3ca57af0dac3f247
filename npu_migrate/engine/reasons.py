"""The reasons a fix is held back in Python code (model.Hold.reason), which summaries count: a
reviewer sees what was not done, and why. Plain strings, so reports read them without the
engine."""

NPU_BRANCH = "code that already handles the NPU"
DUAL_PATH = "a file with an NPU path beside CUDA"
CUDA_MEMBER = "the CUDA member of a per-device family"
GUARDS_CUDA = "it guards CUDA code left"
VALUE_GUARDS_CUDA = "its value guards CUDA code left"
COMPARED_WITH_CUDA = "it is compared with a value left CUDA"
COMPARED_ACROSS_FILES = "it is compared with a value another file decides"
OWN_ATTRIBUTE = "the code's own attribute"
DEVICE_FROM_CALLER = "its data's device is the caller's"
DATA_DEVICE_UNSEEN = "its data is not seen going to the NPU"
FILE_WORDS = "the file's words rule it out"
IMPORT_KEPT = "an import kept for uses left"
MOCK_KEPT = "a mock of a name another file keeps"
REEXPORTED = "an import the file re-exports"
SUPPRESSED = "suppressed"
