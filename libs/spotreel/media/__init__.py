"""Video files: `video` (frames to MP4 and back) and `previews` (a rendered video's thumbnail and
spritesheet)."""
