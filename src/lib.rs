//! SteadQ
