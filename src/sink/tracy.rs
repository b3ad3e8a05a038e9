//! Tracy sink (feature `tracy`): being written.
