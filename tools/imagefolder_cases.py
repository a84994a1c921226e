"""Writes a small ImageFolder full of the cases an ImageFolder reader and its JPEG/PNG decoders
must get right as torchvision and Pillow do, for the C++ tests (tests/python/imagefolder_golden.py
says what torchvision makes of it).

usage: tools/make_imagefolder.py OUT --cases [--bad KIND]... [--seed 0]

OUT (made if missing; its old contents are left where not overwritten: give a fresh folder) gets:
  classes B, a, "a b", ant and z_link, which sort as Python's sorted() sorts them (by code point:
  upper case first, "a" < "a b" < "ant"); z_link is a symlink to the folder a/sub (a symlinked
  class directory: torchvision follows it, so its files are listed twice, under a and z_link);
  in a: nested folders sub/, sub/deeper/, sub-x/ (os.walk's sorted order visits sub-x before
  sub/deeper, as "-" < "/") and a folder named dir.jpg/ (a folder, not a file);
  extensions in every case (.jpg .JPG .jpeg .JPEG .png .Png), a hidden file (.hidden.jpg,
  which torchvision lists), a symlinked file (B/link_to_a01.jpg -> ../a/a01_rgb.png), files
  ImageFolder ignores (notes.txt, photo.jpg.bak, noext), a PNG named .JPEG and a JPEG named
  .png (Pillow goes by the content; so must a decoder);
  JPEGs: qualities 50..95, 4:4:4 / 4:2:2 / 4:2:0, progressive, restart markers, grayscale, CMYK
  (Adobe), an EXIF orientation tag (which ImageFolder does not apply), sizes 1x1, 17x9, 300x37,
  223x224, 500x375, 600x400;
  PNGs: RGB, RGBA, gray, gray+alpha, palette (with and without tRNS transparency), 1-bit,
  16-bit RGB, Adam7-interlaced, 1x1, 37x300.
--bad KIND (repeatable) adds one file or folder that torchvision fails on:
  truncated-jpeg    ant/bad_truncated.jpg: a JPEG cut in half (Pillow: OSError "image file is
                    truncated")
  zero-byte         ant/bad_empty.jpg: 0 bytes (PIL.UnidentifiedImageError)
  text-as-jpg       ant/bad_text.jpg: text (PIL.UnidentifiedImageError)
  bomb              ant/bad_bomb.png: a valid 1-bit PNG of 20000x20000 = 400,000,000 pixels
                    (~50 KB): Pillow warns above Image.MAX_IMAGE_PIXELS = 89,478,485 and refuses
                    (DecompressionBombError) above twice that
  unreadable        ant/bad_unreadable.jpg with mode 000 (root still reads it: tests running
                    as root want dangling-symlink instead)
  dangling-symlink  ant/bad_dangling.jpg -> missing.jpg (listed by ImageFolder, FileNotFoundError
                    when loaded)
  fifo              ant/bad_fifo.jpg: a named pipe (listed by ImageFolder; Pillow's open()
                    blocks for ever waiting for a writer)
  empty-class       a class folder empty/ holding only empty.txt (ImageFolder(OUT) raises
                    FileNotFoundError: "Found no valid file for the classes empty")
  unsupported-bmp   ant/bad_format.bmp: a valid BMP (an ImageFolder extension; Pillow reads it,
                    a JPEG/PNG-only decoder does not)
  unsupported-webp  ant/bad_format.webp: a valid WebP, likewise
Prints what it wrote, one line a file: path (relative to OUT), what it is, bytes.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image

BAD_KINDS = ["truncated-jpeg", "zero-byte", "text-as-jpg", "bomb", "unreadable",
             "dangling-symlink", "fifo", "empty-class", "unsupported-bmp", "unsupported-webp"]


def picture(w, h, seed):
    """An RGB picture of WxH: gradients, discs and a little texture (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    sx, sy = max(w - 1, 1), max(h - 1, 1)
    img = np.stack([255 * x / sx, 255 * y / sy, 128 + 100 * np.sin((x + y) / 9.0 + seed)], -1)
    for _ in range(3):
        cx, cy = rng.uniform(0, w), rng.uniform(0, h)
        r = rng.uniform(0.1, 0.4) * max(w, h)
        inside = (x - cx) ** 2 + (y - cy) ** 2 < r * r
        img[inside] = img[inside] * 0.3 + rng.uniform(0, 255, 3) * 0.7
    img += rng.normal(0, 6, img.shape)
    return Image.fromarray(np.clip(img + 0.5, 0, 255).astype(np.uint8), "RGB")


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(width, height, bit_depth, color_type, raw_rows, interlace=0, level=9):
    """A PNG by hand: IHDR, one IDAT of raw_rows (already filtered, each row with its filter
    byte), IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(raw_rows, level)) + png_chunk(b"IEND", b""))


def rows_of(a):
    """Filter type 0 rows of an array [h, w * channels] of bytes."""
    return b"".join(b"\x00" + row.tobytes() for row in a)


def adam7_png(im):
    """An 8-bit RGB PNG, Adam7-interlaced (Pillow writes only non-interlaced PNGs)."""
    a = np.asarray(im.convert("RGB"))
    h, w = a.shape[:2]
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
              (0, 1, 1, 2)]
    data = b""
    for x0, y0, dx, dy in passes:
        sub = a[y0::dy, x0::dx]
        if sub.size:
            data += rows_of(sub.reshape(sub.shape[0], -1))
    return png_bytes(w, h, 8, 2, data, interlace=1)


def rgb16_png(im):
    """A 16-bit-per-channel RGB PNG: each 8-bit value v as v * 257 plus a low byte that varies,
    so a reader must take the high byte (Pillow does) or round."""
    a = np.asarray(im.convert("RGB")).astype(np.uint16)
    low = (np.arange(a.size, dtype=np.uint16).reshape(a.shape) * 37) % 256
    a16 = (a << 8) | low
    h, w = a.shape[:2]
    return png_bytes(w, h, 16, 2, rows_of(a16.astype(">u2").reshape(h, -1).view(np.uint8)))


def bomb_png(side=20000):
    """A valid 1-bit grey PNG of side x side, all black: a few tens of KB."""
    row = b"\x00" + bytes((side + 7) // 8)
    return png_bytes(side, side, 1, 0, row * side, level=9)


def jpeg(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def png(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "PNG", **kw)
    return buf.getvalue()


def with_exif_orientation(im, orientation=6):
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg(im, quality=90, exif=exif.tobytes())


class Writer:
    def __init__(self, out):
        self.out = out
        self.lines = []

    def file(self, rel, data, what):
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        with open(path, "wb") as f:
            f.write(data)
        self.lines.append((rel, what, len(data)))

    def symlink(self, rel, target, what):
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        os.symlink(target, path)
        self.lines.append((rel, f"{what} (symlink -> {target})", 0))

    def fifo(self, rel, what):
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.lexists(path):
            os.remove(path)
        os.mkfifo(path)
        self.lines.append((rel, what, 0))

    def dir(self, rel, what):
        os.makedirs(os.path.join(self.out, rel), exist_ok=True)
        self.lines.append((rel + "/", what, 0))


def write_good(w, seed):
    p = lambda width, height, k: picture(width, height, seed * 1000 + k)  # noqa: E731
    # B: JPEG variants.
    w.file("B/b01_q95_444.jpg", jpeg(p(64, 48, 1), quality=95, subsampling=0), "JPEG q95 4:4:4 RGB 64x48")
    w.file("B/b02_q75_422.JPG", jpeg(p(80, 60, 2), quality=75, subsampling=1), "JPEG q75 4:2:2 RGB 80x60, upper-case .JPG")
    w.file("B/b03_progressive.jpeg", jpeg(p(120, 90, 3), quality=85, progressive=True), "progressive JPEG q85 4:2:0 120x90")
    w.file("B/b04_gray.jpg", jpeg(p(70, 50, 4).convert("L"), quality=90), "grayscale JPEG (1 component) q90 70x50")
    w.file("B/b05_cmyk.jpg", jpeg(p(60, 40, 5).convert("CMYK"), quality=90), "CMYK JPEG (Adobe, 4 components) q90 60x40")
    w.file("B/b06_1x1.jpg", jpeg(p(1, 1, 6), quality=90), "JPEG 1x1")
    w.file("B/b07_600x400.jpg", jpeg(p(600, 400, 7), quality=90, subsampling=2), "JPEG q90 4:2:0 600x400")
    w.file("B/b08_exif_orientation6.jpg", with_exif_orientation(p(64, 32, 8)), "JPEG 64x32 with EXIF Orientation=6 (not applied by ImageFolder)")
    w.file("B/b09_restart_markers.jpg", jpeg(p(96, 64, 9), quality=90, restart_marker_rows=1), "JPEG q90 96x64 with restart markers every MCU row")
    w.symlink("B/link_to_a01.jpg", "../a/a01_rgb.png", "symlinked file (a PNG)")
    w.file("B/notes.txt", b"not an image\n", "ignored: not an image extension")
    w.file("B/photo.jpg.bak", jpeg(p(8, 8, 10)), "ignored: .bak (a JPEG inside)")
    w.file("B/noext", jpeg(p(8, 8, 11)), "ignored: no extension (a JPEG inside)")
    # a: PNG variants, hidden file, disguised formats, nested folders.
    w.file("a/a01_rgb.png", png(p(50, 40, 20)), "PNG RGB 8-bit 50x40")
    rgba = p(50, 40, 21).convert("RGBA")
    alpha = Image.fromarray(np.tile(np.linspace(0, 255, 50, dtype=np.uint8), (40, 1)), "L")
    rgba.putalpha(alpha)
    w.file("a/a02_rgba.Png", png(rgba), "PNG RGBA (alpha dropped by convert('RGB')) 50x40, .Png")
    w.file("a/a03_gray.png", png(p(33, 21, 22).convert("L")), "PNG gray 8-bit 33x21")
    w.file("a/a04_palette.png", png(p(48, 32, 23).convert("P", palette=Image.ADAPTIVE, colors=16)), "PNG palette (16 colours) 48x32")
    pal = p(48, 32, 24).convert("P", palette=Image.ADAPTIVE, colors=8)
    w.file("a/a05_palette_trns.png", png(pal, transparency=0), "PNG palette with tRNS (index 0 transparent) 48x32")
    w.file("a/a06_1x1.png", png(p(1, 1, 25)), "PNG RGB 1x1")
    w.file("a/a07_interlaced.png", adam7_png(p(45, 29, 26)), "PNG RGB Adam7-interlaced 45x29")
    w.file("a/a08_rgb16.png", rgb16_png(p(30, 20, 27)), "PNG RGB 16-bit 30x20")
    w.file("a/a09_1bit.png", png(p(35, 19, 28).convert("1")), "PNG 1-bit gray 35x19")
    w.file("a/a10_gray_alpha.png", png(p(25, 25, 29).convert("LA")), "PNG gray+alpha 25x25")
    w.file("a/.hidden.jpg", jpeg(p(16, 16, 30)), "hidden file, a JPEG (ImageFolder lists it)")
    w.file("a/png_named.JPEG", png(p(40, 30, 31)), "a PNG named .JPEG (as ImageNet's n02105855_2933.JPEG)")
    w.file("a/sub/s01.jpg", jpeg(p(40, 40, 32)), "JPEG in a nested folder")
    w.file("a/sub/deeper/d01.png", png(p(20, 30, 33)), "PNG two folders deep (visited after sub-x/)")
    w.file("a/sub-x/x01.jpg", jpeg(p(30, 20, 34)), "JPEG in sub-x/ (sorts before sub/deeper/)")
    w.file("a/dir.jpg/inner.png", png(p(10, 10, 35)), "PNG inside a folder named dir.jpg")
    # "a b": odd sizes and aspects.
    w.file("a b/ab01_17x9.jpg", jpeg(p(17, 9, 40), quality=90, subsampling=2), "JPEG 4:2:0 17x9 (partial MCUs)")
    w.file("a b/ab02_37x300.png", png(p(37, 300, 41)), "PNG 37x300 (tall)")
    w.file("a b/ab03_300x37.jpg", jpeg(p(300, 37, 42), quality=90), "JPEG 300x37 (wide)")
    w.file("a b/ab04_223x224.jpg", jpeg(p(223, 224, 43), quality=92), "JPEG 223x224 (just under the crop)")
    w.file("a b/ab05_jpeg_named.png", jpeg(p(40, 30, 44)), "a JPEG named .png")
    w.file("a b/ab06_q50_420.jpg", jpeg(p(100, 75, 45), quality=50, subsampling=2), "JPEG q50 4:2:0 100x75")
    # ant: ImageNet-like sizes.
    w.file("ant/ant01_500x375.JPEG", jpeg(p(500, 375, 50), quality=90, subsampling=2), "JPEG q90 4:2:0 500x375, .JPEG")
    w.file("ant/ant02_375x500.jpg", jpeg(p(375, 500, 51), quality=90, subsampling=2), "JPEG q90 4:2:0 375x500 (portrait)")
    # z_link: a symlinked class directory.
    w.symlink("z_link", "a/sub", "symlinked class directory")


def write_bad(w, kind, seed):
    p = lambda width, height, k: picture(width, height, seed * 1000 + k)  # noqa: E731
    if kind == "truncated-jpeg":
        data = jpeg(p(200, 150, 60), quality=90)
        w.file("ant/bad_truncated.jpg", data[: len(data) // 2], "bad: JPEG cut in half")
    elif kind == "zero-byte":
        w.file("ant/bad_empty.jpg", b"", "bad: zero bytes")
    elif kind == "text-as-jpg":
        w.file("ant/bad_text.jpg", b"This is not a JPEG file.\n" * 4, "bad: text named .jpg")
    elif kind == "bomb":
        w.file("ant/bad_bomb.png", bomb_png(), "bad: PNG of 20000x20000 = 400,000,000 pixels (1-bit, valid)")
    elif kind == "unreadable":
        w.file("ant/bad_unreadable.jpg", jpeg(p(20, 20, 61)), "bad: mode 000 (readable by root all the same)")
        os.chmod(os.path.join(w.out, "ant/bad_unreadable.jpg"), 0)
    elif kind == "dangling-symlink":
        w.symlink("ant/bad_dangling.jpg", "missing.jpg", "bad: dangling symlink")
    elif kind == "fifo":
        w.fifo("ant/bad_fifo.jpg", "bad: a named pipe")
    elif kind == "empty-class":
        w.dir("empty", "bad: a class folder without images")
        w.file("empty/empty.txt", b"no images here\n", "ignored: the empty class's only file")
    elif kind == "unsupported-bmp":
        buf = io.BytesIO()
        p(24, 16, 62).save(buf, "BMP")
        w.file("ant/bad_format.bmp", buf.getvalue(), "unsupported: BMP 24x16 (Pillow reads it)")
    elif kind == "unsupported-webp":
        buf = io.BytesIO()
        p(24, 16, 63).save(buf, "WEBP", quality=90)
        w.file("ant/bad_format.webp", buf.getvalue(), "unsupported: WebP 24x16 (Pillow reads it)")


def write(out, bad, seed):
    """Writes the cases into `out`, then the bad files of the `bad` kinds; lists them on stdout."""
    w = Writer(out)
    os.makedirs(out, exist_ok=True)
    write_good(w, seed)
    for kind in bad:
        write_bad(w, kind, seed)
    width = max(len(rel) for rel, _, _ in w.lines)
    for rel, what, size in w.lines:
        print(f"{rel:<{width}}  {size:>7}  {what}")
    print(f"wrote {len(w.lines)} entries to {out}", file=sys.stderr)
