"""Reference data for tests/data/image_decode_test.cpp and resize_test.cpp, from PIL (what
torchvision's ImageFolder uses: Image.open(f).convert("RGB"), Image.resize(..., BILINEAR, box)).

usage: image_reference.py decode|resize OUTPUT_DIR

decode: writes JPEG and PNG files of many kinds into OUTPUT_DIR, next to each a .rgb file with the
bytes PIL's convert("RGB") gives, and OUTPUT_DIR/manifest.txt, one line per file:
    FILE ok WIDTH HEIGHT            (FILE.rgb holds the pixels)
    FILE error WORDS...             (PIL refuses it too; the message must contain WORDS)
resize: writes source images (raw RGB) and, per case, the bytes PIL's resize gives; manifest lines
    resize SRC SRC_W SRC_H X0 Y0 X1 Y1 OUT_W OUT_H OUT      (Image.resize with box)
    crop SRC SRC_W SRC_H LEFT TOP W H OUT_W OUT_H OUT       (Image.crop(...).resize(...))
Floats are written with repr(), so the test reads back the very doubles PIL was given.
Both also write OUTPUT_DIR/pillow.txt: PIL.__version__, as the tests' expectations depend on it.
"""
import ctypes
import ctypes.util
import io
import os
import struct
import sys
import warnings
import zlib

import numpy as np
import PIL
from PIL import Image

RNG = np.random.RandomState(1234)
# convert("RGB") of a palette with tRNS warns that RGBA would keep the alpha: RGB is what we test.
warnings.filterwarnings("ignore", "Palette images with Transparency")


def photo(width, height, seed=0):
    """A photo-like RGB image: smooth gradients, edges and some noise (all of a JPEG's work)."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 128 + 100 * np.sin(x / 17.0) * np.cos(y / 23.0)
    g = 255 * x / max(width - 1, 1)
    b = np.where((x // 13 + y // 11) % 2 == 0, 40.0, 210.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def rgb_image(array):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    return Image.frombytes("RGB", (array.shape[1], array.shape[0]), array.tobytes())


# A PNG writer for what PIL cannot write (16-bit gray+alpha, 2-bit gray, palettes with 1-bit
# depth and tRNS, Adam7 interlacing): every filter type is used, one per row in turn.
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def pack_row(samples, depth):
    """One row of samples (ints) as PNG bytes at `depth` bits."""
    if depth == 16:
        return b"".join(struct.pack(">H", int(s)) for s in samples)
    if depth == 8:
        return bytes(int(s) for s in samples)
    per_byte = 8 // depth
    out = bytearray((len(samples) + per_byte - 1) // per_byte)
    for i, s in enumerate(samples):
        out[i // per_byte] |= int(s) << (8 - depth * (i % per_byte + 1))
    return bytes(out)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def filter_rows(rows, bpp):
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for n, row in enumerate(rows):
        kind = n % 5
        out.append(kind)
        for i, v in enumerate(row):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = [0, a, b, (a + b) // 2, paeth(a, b, c)][kind]
            out.append((v - pred) & 0xFF)
        prev = row
    return bytes(out)


def write_png(samples, color_type, depth, interlace=False, palette=None, trns=None):
    """samples: (height, width, channels) ints; returns the PNG file's bytes."""
    height, width, channels = samples.shape
    assert channels == CHANNELS[color_type]
    bpp = max(1, channels * depth // 8)
    passes = ADAM7 if interlace else [(0, 0, 1, 1)]
    data = b""
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        rows = [pack_row(sub[y].reshape(-1), depth) for y in range(sub.shape[0])]
        data += filter_rows(rows, bpp)
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, int(interlace))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
    if palette is not None:
        png += chunk(b"PLTE", bytes(palette))
    if trns is not None:
        png += chunk(b"tRNS", trns)
    # The compressed stream split over several IDAT chunks, as encoders do.
    compressed = zlib.compress(data, 9)
    for start in range(0, len(compressed), 1000):
        png += chunk(b"IDAT", compressed[start:start + 1000])
    return png + chunk(b"IEND", b"")


class Writer:
    def __init__(self, out):
        self.out = out
        self.lines = []

    def ok(self, name, data):
        """A file PIL decodes: its bytes, and PIL's RGB next to it."""
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)
        with Image.open(io.BytesIO(data)) as im:
            rgb = im.convert("RGB")
        with open(os.path.join(self.out, name + ".rgb"), "wb") as f:
            f.write(rgb.tobytes())
        self.lines.append(f"{name} ok {rgb.size[0]} {rgb.size[1]}")

    def error(self, name, data, words):
        """A file PIL refuses (checked here); the test expects `words` in the message."""
        with open(os.path.join(self.out, name), "wb") as f:
            f.write(data)
        try:
            with Image.open(io.BytesIO(data)) as im:
                im.convert("RGB")
        except Exception:  # PIL raises OSError, SyntaxError, DecompressionBombError, ...
            self.lines.append(f"{name} error {words}")
            return
        raise AssertionError(f"PIL decodes {name}, which the test expects to fail")

    def save(self):
        with open(os.path.join(self.out, "manifest.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def jpeg_bytes(image, **options):
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def png_bytes(image, **options):
    buffer = io.BytesIO()
    image.save(buffer, "PNG", **options)
    return buffer.getvalue()


def jpeg_cases(w):
    base = rgb_image(photo(203, 157))
    for quality in (50, 75, 95):
        for subsampling, label in ((0, "444"), (1, "422"), (2, "420")):
            w.ok(f"q{quality}_{label}.jpg", jpeg_bytes(base, quality=quality,
                                                      subsampling=subsampling))
    w.ok("progressive_420.jpg", jpeg_bytes(base, quality=85, progressive=True))
    w.ok("progressive_444.jpg", jpeg_bytes(base, quality=90, progressive=True, subsampling=0))
    w.ok("optimized.jpg", jpeg_bytes(base, quality=80, optimize=True))
    w.ok("gray.jpg", jpeg_bytes(base.convert("L"), quality=85))
    w.ok("gray_progressive.jpg", jpeg_bytes(base.convert("L"), quality=70, progressive=True))
    cmyk = Image.frombytes("CMYK", base.size, RNG.randint(0, 256, (157, 203, 4), np.uint8))
    w.ok("cmyk.jpg", jpeg_bytes(cmyk, quality=90))
    w.ok("cmyk_from_rgb.jpg", jpeg_bytes(base.convert("CMYK"), quality=90))
    ycck = ycck_jpeg(base.convert("CMYK").tobytes(), *base.size)
    if ycck is not None:
        w.ok("ycck.jpg", ycck)
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90; convert("RGB") ignores it
    w.ok("exif_rotated.jpg", jpeg_bytes(base, quality=90, exif=exif))
    for width, height in ((1, 1), (1, 37), (37, 1), (17, 9), (16, 16), (33, 65)):
        small = rgb_image(photo(width, height, seed=width * 100 + height))
        w.ok(f"small_{width}x{height}.jpg", jpeg_bytes(small, quality=90))
    w.ok("large_500x375.jpg", jpeg_bytes(rgb_image(photo(500, 375, seed=5)), quality=90))
    good = jpeg_bytes(base, quality=90)
    # libjpeg warns "Corrupt JPEG data: 7 extraneous bytes before marker 0xd9"; PIL decodes it.
    w.ok("extraneous_bytes.jpg", good[:-2] + b"garbage" + good[-2:])
    w.error("truncated.jpg", good[: len(good) * 6 // 10], "truncated JPEG")
    w.error("truncated_header.jpg", good[:300], "truncated JPEG")
    w.error("truncated_no_eoi.jpg", good[:-2], "truncated JPEG")
    progressive = jpeg_bytes(base, quality=85, progressive=True)
    w.error("truncated_progressive.jpg", progressive[: len(progressive) * 7 // 10],
            "truncated JPEG")
    w.error("corrupt_sof.jpg", corrupt_sof(good), "corrupt JPEG")


def ycck_jpeg(cmyk, width, height):
    """A YCCK JPEG (Adobe transform 2), which PIL cannot write, through libjpeg-turbo's TurboJPEG
    (TJPF_CMYK input makes YCCK); None where the library cannot be loaded."""
    try:
        tj = ctypes.CDLL(ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0")
    except OSError:
        return None
    tj.tjInitCompress.restype = ctypes.c_void_p
    handle = ctypes.c_void_p(tj.tjInitCompress())
    out, size = ctypes.POINTER(ctypes.c_ubyte)(), ctypes.c_ulong(0)
    tjpf_cmyk, tjsamp_420 = 11, 2
    rc = tj.tjCompress2(handle, cmyk, width, 0, height, tjpf_cmyk, ctypes.byref(out),
                        ctypes.byref(size), tjsamp_420, 90, 0)
    data = ctypes.string_at(out, size.value) if rc == 0 else None
    tj.tjFree(out)
    tj.tjDestroy(handle)
    return data


def corrupt_sof(data):
    """The frame header's component count set to 2, which neither libjpeg nor PIL reads."""
    at = data.index(b"\xff\xc0")
    return data[: at + 9] + b"\x02" + data[at + 10:]


def png_cases(w):
    base = photo(61, 43, seed=7)
    gray = base[..., 1]
    for interlace in (False, True):
        tag = "_interlaced" if interlace else ""
        for depth in (1, 2, 4, 8, 16):
            top = (1 << depth) - 1
            samples = (gray.astype(np.int64) * top // 255)[..., None]
            if depth == 16:  # values over 255 and under: PIL clips 16-bit gray to 255
                samples = (gray.astype(np.int64) * 3)[..., None]
            w.ok(f"gray{depth}{tag}.png", write_png(samples, 0, depth, interlace))
        alpha = RNG.randint(0, 256, gray.shape)
        for depth in (8, 16):
            # 16 bits: a random low byte under the high one, which PIL keeps.
            scale, low = (256, RNG.randint(0, 256, base.shape)) if depth == 16 else (1, 0 * base)
            ga = np.stack([gray.astype(np.int64) * scale + low[..., 0], alpha * scale], axis=-1)
            w.ok(f"gray_alpha{depth}{tag}.png", write_png(ga, 4, depth, interlace))
            rgb = base.astype(np.int64) * scale + low
            w.ok(f"rgb{depth}{tag}.png", write_png(rgb, 2, depth, interlace))
            rgba = np.concatenate([rgb, alpha[..., None] * scale], axis=-1)
            w.ok(f"rgba{depth}{tag}.png", write_png(rgba, 6, depth, interlace))
        for depth in (1, 2, 4, 8):
            entries = 1 << depth
            palette = RNG.randint(0, 256, entries * 3).tolist()
            index = RNG.randint(0, entries, gray.shape)[..., None]
            w.ok(f"palette{depth}{tag}.png", write_png(index, 3, depth, interlace, palette))
            trns = bytes(RNG.randint(0, 256, entries).tolist())
            w.ok(f"palette{depth}_trns{tag}.png",
                 write_png(index, 3, depth, interlace, palette, trns))
        w.ok(f"gray8_trns{tag}.png", write_png(gray[..., None], 0, 8, interlace,
                                                trns=struct.pack(">H", int(gray[0, 0]))))
        w.ok(f"rgb8_trns{tag}.png", write_png(base, 2, 8, interlace,
                                               trns=struct.pack(">HHH", *base[0, 0].tolist())))
    # Indices past the end of the palette: libspng and Pillow (10.4 on; not 9.4) give black.
    w.ok("palette_out_of_range.png", write_png((np.arange(12).reshape(3, 4, 1) * 21) % 256, 3, 8,
                                               palette=[10, 20, 30, 40, 50, 60]))
    for width, height in ((1, 1), (1, 9), (9, 1), (3, 2)):  # Adam7 passes with nothing in them
        tiny = photo(width, height, seed=width + height)
        w.ok(f"tiny_{width}x{height}_interlaced.png", write_png(tiny, 2, 8, True))
    image = rgb_image(base)
    w.ok("pil_rgb.png", png_bytes(image))
    w.ok("pil_rgba.png", png_bytes(image.convert("RGBA")))
    w.ok("pil_l.png", png_bytes(image.convert("L")))
    w.ok("pil_la.png", png_bytes(image.convert("LA")))
    w.ok("pil_p.png", png_bytes(image.convert("P", palette=Image.Palette.ADAPTIVE)))
    w.ok("pil_1.png", png_bytes(image.convert("1")))
    with_trns = image.convert("P", palette=Image.Palette.ADAPTIVE)
    w.ok("pil_p_trns.png", png_bytes(with_trns, transparency=3))
    good = png_bytes(image)
    w.error("truncated.png", good[: len(good) // 2], "truncated PNG")
    w.error("truncated_header.png", good[:20], "truncated PNG")
    huge = struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0)
    w.error("huge_header.png", b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", huge) + good[33:],
            "10000000000 pixels, more than the limit of 89478485")
    idat = good.index(b"IDAT") + 8
    w.error("corrupt_idat.png", good[:idat] + bytes(64) + good[idat + 64:], "corrupt PNG")


def decode(out):
    w = Writer(out)
    jpeg_cases(w)
    png_cases(w)
    w.error("empty.jpg", b"", "empty file")
    w.error("notes.txt", b"just some text, not an image\n", "not a JPEG or PNG image")
    w.error("lying_name.png", b"GIF89a" + bytes(40), "not a JPEG or PNG image")
    w.save()


def resize(out):
    lines = []
    sources = {"noise": RNG.randint(0, 256, (73, 97, 3)).astype(np.uint8),
               "photo": photo(640, 480, seed=3),
               "column": photo(1, 50, seed=4),
               "tall": photo(40, 300, seed=6)}
    for name, array in sources.items():
        array.tofile(os.path.join(out, name + ".rgb"))

    def emit(kind, src, numbers, size, result):
        n = len(lines)
        result.tofile(os.path.join(out, f"out{n}.rgb"))
        h, w = sources[src].shape[:2]
        fields = [kind, src, w, h] + [repr(v) for v in numbers] + [size[0], size[1], f"out{n}.rgb"]
        lines.append(" ".join(str(f) for f in fields))

    def case(src, box, size):
        im = rgb_image(sources[src])
        box = box if box is not None else (0, 0) + im.size
        emit("resize", src, box, size, np.asarray(im.resize(size, Image.BILINEAR, box=box)))

    def crop(src, left, top, width, height, size):
        im = rgb_image(sources[src]).crop((left, top, left + width, top + height))
        emit("crop", src, (left, top, width, height), size,
             np.asarray(im.resize(size, Image.BILINEAR)))

    for size in ((224, 224), (97, 73), (300, 500), (1, 1), (1, 50), (50, 1), (223, 117),
                 (3, 2), (640, 480), (96, 73), (97, 74), (1000, 9)):
        case("photo", None, size)
        case("noise", None, size)
    for box, size in (((10.5, 3.25, 80.75, 60.125), (224, 224)), ((0.3, 0.7, 5.9, 4.1), (50, 40)),
                      ((0, 0, 97, 73), (97, 73)), ((0.5, 0, 97, 73), (97, 73)),
                      ((5, 5, 50, 40), (45, 35)), ((5, 5, 50, 40), (45, 17)),
                      ((5, 5, 5, 40), (3, 9)), ((96, 72, 97, 73), (7, 7)),
                      ((1 / 3, 2 / 3, 96.9, 72.1), (31, 23))):
        case("noise", box, size)
    # Pillow 13 runs the vertical pass first where the image loses over twice as many rows as
    # columns: both sides of that line.
    case("noise", None, (87, 53))
    case("noise", None, (87, 52))
    case("tall", None, (40, 100))
    case("tall", None, (60, 100))
    case("tall", (3.5, 10.25, 38.0, 290.5), (60, 50))
    case("tall", (3.5, 10.25, 38.0, 290.5), (20, 50))
    crop("tall", 5, 20, 30, 250, (224, 224))
    crop("tall", 5, 20, 30, 250, (24, 100))
    case("column", None, (1, 224))
    case("column", None, (224, 224))
    case("column", (0, 10.5, 1, 20.25), (3, 17))
    for _ in range(40):
        x0, x1 = sorted(RNG.uniform(0, 640, 2))
        y0, y1 = sorted(RNG.uniform(0, 480, 2))
        case("photo", (float(x0), float(y0), float(x1), float(y1)), tuple(int(v) for v in RNG.randint(1, 300, 2)))
    crop("photo", 17, 33, 300, 200, (224, 224))
    crop("photo", 0, 0, 640, 480, (224, 224))
    crop("photo", 600, 470, 40, 10, (224, 224))
    crop("photo", 123, 45, 1, 1, (5, 5))
    for _ in range(20):
        width, height = (int(v) for v in RNG.randint(1, 400, 2))
        left, top = int(RNG.randint(0, 640 - width + 1)), int(RNG.randint(0, 480 - height + 1))
        crop("photo", left, top, width, height, tuple(int(v) for v in RNG.randint(1, 260, 2)))
    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("decode", "resize"):
        sys.exit(__doc__)
    {"decode": decode, "resize": resize}[sys.argv[1]](sys.argv[2])
    with open(os.path.join(sys.argv[2], "pillow.txt"), "w") as f:
        f.write(PIL.__version__ + "\n")
