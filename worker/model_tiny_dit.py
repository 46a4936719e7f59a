"""Tiny random-weight diffusion-transformer video models (Wan 2.1, LTX-Video, CogVideoX), built offline.

Same idea as `model_tiny.py` for the UNet3D family: the tests load these through the same
`DiffusionPipeline.from_pretrained` path a downloaded model takes, so each family's loop is checked against
the stock diffusers pipeline on real files. The T5/UMT5 text encoders are random too, and their tokenizer is
a word-level `tokenizers` vocabulary made here (no sentencepiece model, no hub): T5's special ids (pad 0,
eos 1, unk 2), `</s>` appended, unknown words map to `<unk>`. Configs follow diffusers' own pipeline tests,
shrunk until a render takes well under a second on a CPU.
"""

from __future__ import annotations

from spotreel.worker.model_tiny import _WORDS

TEXT_DIM = 32


def build_t5_tokenizer(max_tokens: int = 512):
    from tokenizers import Tokenizer, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "</s>", "<unk>"] + sorted(set(_WORDS))
    vocab = {w: i for i, w in enumerate(words)}
    tok = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                                       special_tokens=[("</s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=max_tokens)


def _t5(umt5: bool, vocab_size: int):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    kw = dict(vocab_size=vocab_size, d_model=TEXT_DIM, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
              relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    if umt5:
        return UMT5EncoderModel(UMT5Config(**kw))
    return T5EncoderModel(T5Config(**kw))


def build_wan():
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel

    tokenizer = build_t5_tokenizer()
    transformer = WanTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
        text_dim=TEXT_DIM, freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True,
        qk_norm="rms_norm_across_heads", rope_max_seq_len=32)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True])
    # Wan 2.1's own scheduler: UniPC on flow matching (flow_shift 3.0 at 480p).
    scheduler = UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True,
                                        num_train_timesteps=1000, flow_shift=3.0)
    return WanPipeline(tokenizer=tokenizer, text_encoder=_t5(True, len(tokenizer)), transformer=transformer,
                       vae=vae, scheduler=scheduler)


def _ltx_parts() -> dict:
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXVideoTransformer3DModel

    tokenizer = build_t5_tokenizer(128)
    transformer = LTXVideoTransformer3DModel(
        in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4, attention_head_dim=8,
        cross_attention_dim=32, num_layers=1, caption_channels=TEXT_DIM)
    vae = AutoencoderKLLTXVideo(
        in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
        decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1), spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False),
        decoder_inject_noise=(False, False, False, False, False), upsample_residual=(False, False, False, False),
        upsample_factor=(1, 1, 1, 1), timestep_conditioning=False, patch_size=1, patch_size_t=1,
        encoder_causal=True, decoder_causal=False)
    scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                                                base_image_seq_len=1024, max_image_seq_len=4096,
                                                shift_terminal=0.1)
    return dict(tokenizer=tokenizer, text_encoder=_t5(False, len(tokenizer)), transformer=transformer, vae=vae,
                scheduler=scheduler)


def build_ltx():
    from diffusers import LTXPipeline

    return LTXPipeline(**_ltx_parts())


def build_ltx_i2v():
    """LTX-Video's image-to-video pipeline: the same components as text-to-video (the VAE's encoder turns the
    image into the first latent frame), so one tiny build serves both."""
    from diffusers import LTXImageToVideoPipeline

    return LTXImageToVideoPipeline(**_ltx_parts())


def build_cogvideox():
    from diffusers import (AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXPipeline,
                           CogVideoXTransformer3DModel)

    tokenizer = build_t5_tokenizer(16)
    transformer = CogVideoXTransformer3DModel(
        num_attention_heads=4, attention_head_dim=8, in_channels=4, out_channels=4, time_embed_dim=2,
        text_embed_dim=TEXT_DIM, num_layers=1, sample_width=2, sample_height=2, sample_frames=9, patch_size=2,
        temporal_compression_ratio=4, max_text_seq_length=16)
    vae = AutoencoderKLCogVideoX(
        in_channels=3, out_channels=3, down_block_types=("CogVideoXDownBlock3D",) * 4,
        up_block_types=("CogVideoXUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8), latent_channels=4,
        layers_per_block=1, norm_num_groups=2, temporal_compression_ratio=4)
    # CogVideoX-2b's scheduler settings (v_prediction, zero terminal SNR, trailing spacing).
    scheduler = CogVideoXDDIMScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012,
                                       prediction_type="v_prediction", rescale_betas_zero_snr=True,
                                       set_alpha_to_one=True, timestep_spacing="trailing", clip_sample=False,
                                       snr_shift_scale=3.0)
    return CogVideoXPipeline(tokenizer=tokenizer, text_encoder=_t5(False, len(tokenizer)),
                             transformer=transformer, vae=vae, scheduler=scheduler)


BUILDERS = {"wan": build_wan, "ltx": build_ltx, "ltx-i2v": build_ltx_i2v, "cogvideox": build_cogvideox}
