"""Draw Lily's kernel logo: kernelspec/logo-svg.svg, logo-32x32.png and logo-64x64.png.

    python scripts/logo.py

A white three-petal lily with a golden heart on a violet rounded square. The
PNGs are rasterised here from the same geometry as the SVG with the standard
library only (zlib + struct, 4x4 supersampling), so the logo needs no image
library; JupyterLab's launcher shows the 64x64 one, the tab the 32x32 one.
"""
from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "kernelspec"
VIOLET, WHITE, GOLD = (0x6B, 0x3F, 0xA0), (0xFF, 0xFF, 0xFF), (0xF2, 0xB7, 0x05)
# geometry in a 64x64 box
RADIUS = 14  # corner radius of the square
PETALS = (-90, 30, 150)  # petal directions, degrees (0 = right, clockwise)
PETAL_CENTRE, PETAL_RX, PETAL_RY = 13.0, 15.0, 7.5  # distance from the middle, semi-axes
HEART = 6.0


def inside_rounded_square(x: float, y: float) -> bool:
    cx = min(max(x, RADIUS), 64 - RADIUS)
    cy = min(max(y, RADIUS), 64 - RADIUS)
    return (x - cx) ** 2 + (y - cy) ** 2 <= RADIUS ** 2 and 0 <= x <= 64 and 0 <= y <= 64


def inside_petal(x: float, y: float) -> bool:
    for angle in PETALS:
        a = math.radians(angle)
        px, py = 32 + PETAL_CENTRE * math.cos(a), 32 + PETAL_CENTRE * math.sin(a)
        dx, dy = x - px, y - py
        u = dx * math.cos(a) + dy * math.sin(a)  # along the petal
        v = -dx * math.sin(a) + dy * math.cos(a)
        if (u / PETAL_RX) ** 2 + (v / PETAL_RY) ** 2 <= 1:
            return True
    return False


def colour_at(x: float, y: float) -> tuple[int, int, int, int]:
    if not inside_rounded_square(x, y):
        return (0, 0, 0, 0)
    if (x - 32) ** 2 + (y - 32) ** 2 <= HEART ** 2:
        return (*GOLD, 255)
    if inside_petal(x, y):
        return (*WHITE, 255)
    return (*VIOLET, 255)


def raster(size: int, samples: int = 4) -> bytes:
    scale = 64 / size
    rows = []
    for py in range(size):
        row = bytearray([0])  # filter type 0
        for px in range(size):
            acc = [0, 0, 0, 0]
            for sy in range(samples):
                for sx in range(samples):
                    r, g, b, a = colour_at((px + (sx + 0.5) / samples) * scale,
                                           (py + (sy + 0.5) / samples) * scale)
                    acc[0] += r * a
                    acc[1] += g * a
                    acc[2] += b * a
                    acc[3] += a
            n = samples * samples
            alpha = acc[3] / n
            rgb = [round(c / acc[3]) if acc[3] else 0 for c in acc[:3]]
            row += bytes([*rgb, round(alpha)])
        rows.append(bytes(row))
    return b"".join(rows)


def png(size: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raster(size), 9)) + chunk(b"IEND", b""))


def svg() -> str:
    petals = "\n".join(
        f'  <ellipse cx="{32 + PETAL_CENTRE * math.cos(math.radians(a)):.2f}" '
        f'cy="{32 + PETAL_CENTRE * math.sin(math.radians(a)):.2f}" rx="{PETAL_RX}" '
        f'ry="{PETAL_RY}" transform="rotate({a} {32 + PETAL_CENTRE * math.cos(math.radians(a)):.2f} '
        f'{32 + PETAL_CENTRE * math.sin(math.radians(a)):.2f})" fill="#ffffff"/>'
        for a in PETALS)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">\n'
            f'  <title>Lily</title>\n'
            f'  <rect width="64" height="64" rx="{RADIUS}" fill="#6b3fa0"/>\n{petals}\n'
            f'  <circle cx="32" cy="32" r="{HEART}" fill="#f2b705"/>\n</svg>\n')


if __name__ == "__main__":
    (OUT / "logo-svg.svg").write_text(svg())
    for size in (32, 64):
        (OUT / f"logo-{size}x{size}.png").write_bytes(png(size))
    print("wrote", ", ".join(p.name for p in sorted(OUT.glob("logo-*"))))
