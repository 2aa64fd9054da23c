//! Local inference: everything between a loaded model and a `ModelResponse`.
//! - [`constrain`]: structured output (constrained JSON decoding, free-mode parsing).

pub mod constrain;
