//! CUDA backend (feature `cuda`): being written.
