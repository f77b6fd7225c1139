//! Stitcher.
