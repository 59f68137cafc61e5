"""Vision-language-action policies on Hugging Face ``transformers`` image-text-to-text backbones."""
