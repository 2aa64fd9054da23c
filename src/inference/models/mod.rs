//! Model architectures, one file per family. `decoder` holds the parts the
//! standard decoder-only transformer families share; each family file says
//! which parts its architecture uses and reads its own hyperparameters.

pub mod decoder;
pub mod gemma3;
pub mod llama;
pub mod qwen2;
pub mod qwen3;
