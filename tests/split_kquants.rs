//! `JOULE_CPU_KERNEL_TYPES=split` (`quant_matmul::split`): Q4_K and Q6_K matrices candle repacks
//! are held twice and each sequence's rows of a step go to Joule's kernels when they are 1 to 16
//! (decode, small batches) and to candle's repacked ones when longer (prompts). A sequence's
//! logits must still not depend on what it is batched with: the plan of
//! `tests/full/continuous_batching.rs` on a synthesized SmolLM2 Q4_K_M, bit for bit. The variable is
//! set by the one test of this binary before anything reads it.

mod batch_rows;
mod roster_common;

#[test]
fn split_k_quants_keep_every_sequence_independent_of_its_batch() {
    std::env::set_var("JOULE_CPU_KERNEL_TYPES", "split");
    use joule::inference::files::gguf_weights::GgufFile;
    let (_dir, gguf) = batch_rows::synthesized_smollm2_q4_k_m();
    let mut file = GgufFile::open(&gguf).unwrap();
    let model = joule::inference::models::load_model_from(&mut file, &roster_common::test_device())
        .unwrap();
    if std::env::var_os("JOULE_CANDLE_KERNELS_ONLY").is_none() {
        for t in [
            candle_core::quantized::GgmlDType::Q4K,
            candle_core::quantized::GgmlDType::Q6K,
        ] {
            assert!(
                file.matmuls().iter().any(|u| u.dtype == t && u.split),
                "no split {t:?} matrix: {:?}",
                file.matmuls()
            );
        }
    }
    batch_rows::rows_are_independent(model.as_ref(), "SmolLM2 Q4_K_M, split Q4_K/Q6_K", true);
}
