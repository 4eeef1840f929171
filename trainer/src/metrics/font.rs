//! A built-in 5x8 bitmap font for chart text (plotters draws no text without a font
//! feature, and those need system libraries), drawn pixel by pixel, at any integer
//! scale, horizontally or rotated to read upwards.
//!
//! Each glyph is 8 rows of 5 pixels: capitals and digits stand on row 6, lowercase
//! letters have their x-height on rows 2 to 6, and row 7 holds descenders. Every
//! printable ASCII character has a glyph; anything else is drawn as a hollow box.

/// Pixels across a glyph.
pub(super) const GLYPH_WIDTH: u32 = 5;
/// Pixel rows of a glyph, descender included.
pub(super) const GLYPH_HEIGHT: u32 = 8;
/// Horizontal distance between consecutive characters, in unscaled pixels.
pub(super) const ADVANCE: u32 = GLYPH_WIDTH + 1;

/// The glyph drawn for a character that has none.
const MISSING: [u8; 8] = [
    0b11111, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b11111, 0b00000,
];

/// The rows of `c`'s glyph, top first; bit 4 is the leftmost pixel.
fn glyph(c: char) -> [u8; 8] {
    match c {
        ' ' => [0, 0, 0, 0, 0, 0, 0, 0],
        '!' => [0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0, 0b00100, 0],
        '"' => [0b01010, 0b01010, 0, 0, 0, 0, 0, 0],
        '#' => [
            0b01010, 0b01010, 0b11111, 0b01010, 0b11111, 0b01010, 0b01010, 0,
        ],
        '$' => [
            0b00100, 0b01111, 0b10100, 0b01110, 0b00101, 0b11110, 0b00100, 0,
        ],
        '%' => [
            0b11000, 0b11001, 0b00010, 0b00100, 0b01000, 0b10011, 0b00011, 0,
        ],
        '&' => [
            0b01100, 0b10010, 0b10100, 0b01000, 0b10101, 0b10010, 0b01101, 0,
        ],
        '\'' => [0b00100, 0b00100, 0, 0, 0, 0, 0, 0],
        '(' => [
            0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0b00100, 0b00010, 0,
        ],
        ')' => [
            0b01000, 0b00100, 0b00010, 0b00010, 0b00010, 0b00100, 0b01000, 0,
        ],
        '*' => [0, 0b00100, 0b10101, 0b01110, 0b10101, 0b00100, 0, 0],
        '+' => [0, 0b00100, 0b00100, 0b11111, 0b00100, 0b00100, 0, 0],
        ',' => [0, 0, 0, 0, 0, 0b00110, 0b00100, 0b01000],
        '-' => [0, 0, 0, 0b11111, 0, 0, 0, 0],
        '.' => [0, 0, 0, 0, 0, 0b01100, 0b01100, 0],
        '/' => [0, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0, 0],
        '0' => [
            0b01110, 0b10001, 0b10011, 0b10101, 0b11001, 0b10001, 0b01110, 0,
        ],
        '1' => [
            0b00100, 0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0,
        ],
        '2' => [
            0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0b01000, 0b11111, 0,
        ],
        '3' => [
            0b11111, 0b00010, 0b00100, 0b00010, 0b00001, 0b10001, 0b01110, 0,
        ],
        '4' => [
            0b00010, 0b00110, 0b01010, 0b10010, 0b11111, 0b00010, 0b00010, 0,
        ],
        '5' => [
            0b11111, 0b10000, 0b11110, 0b00001, 0b00001, 0b10001, 0b01110, 0,
        ],
        '6' => [
            0b00110, 0b01000, 0b10000, 0b11110, 0b10001, 0b10001, 0b01110, 0,
        ],
        '7' => [
            0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b01000, 0b01000, 0,
        ],
        '8' => [
            0b01110, 0b10001, 0b10001, 0b01110, 0b10001, 0b10001, 0b01110, 0,
        ],
        '9' => [
            0b01110, 0b10001, 0b10001, 0b01111, 0b00001, 0b00010, 0b01100, 0,
        ],
        ':' => [0, 0b01100, 0b01100, 0, 0b01100, 0b01100, 0, 0],
        ';' => [0, 0b01100, 0b01100, 0, 0b01100, 0b00100, 0b01000, 0],
        '<' => [
            0b00010, 0b00100, 0b01000, 0b10000, 0b01000, 0b00100, 0b00010, 0,
        ],
        '=' => [0, 0, 0b11111, 0, 0b11111, 0, 0, 0],
        '>' => [
            0b01000, 0b00100, 0b00010, 0b00001, 0b00010, 0b00100, 0b01000, 0,
        ],
        '?' => [0b01110, 0b10001, 0b00001, 0b00010, 0b00100, 0, 0b00100, 0],
        '@' => [
            0b01110, 0b10001, 0b00001, 0b01101, 0b10101, 0b10101, 0b01110, 0,
        ],
        'A' => [
            0b01110, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001, 0,
        ],
        'B' => [
            0b11110, 0b10001, 0b10001, 0b11110, 0b10001, 0b10001, 0b11110, 0,
        ],
        'C' => [
            0b01110, 0b10001, 0b10000, 0b10000, 0b10000, 0b10001, 0b01110, 0,
        ],
        'D' => [
            0b11100, 0b10010, 0b10001, 0b10001, 0b10001, 0b10010, 0b11100, 0,
        ],
        'E' => [
            0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b11111, 0,
        ],
        'F' => [
            0b11111, 0b10000, 0b10000, 0b11110, 0b10000, 0b10000, 0b10000, 0,
        ],
        'G' => [
            0b01110, 0b10001, 0b10000, 0b10111, 0b10001, 0b10001, 0b01111, 0,
        ],
        'H' => [
            0b10001, 0b10001, 0b10001, 0b11111, 0b10001, 0b10001, 0b10001, 0,
        ],
        'I' => [
            0b01110, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0,
        ],
        'J' => [
            0b00111, 0b00010, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100, 0,
        ],
        'K' => [
            0b10001, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0b10001, 0,
        ],
        'L' => [
            0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b10000, 0b11111, 0,
        ],
        'M' => [
            0b10001, 0b11011, 0b10101, 0b10101, 0b10001, 0b10001, 0b10001, 0,
        ],
        'N' => [
            0b10001, 0b10001, 0b11001, 0b10101, 0b10011, 0b10001, 0b10001, 0,
        ],
        'O' => [
            0b01110, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110, 0,
        ],
        'P' => [
            0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000, 0b10000, 0,
        ],
        'Q' => [
            0b01110, 0b10001, 0b10001, 0b10001, 0b10101, 0b10010, 0b01101, 0,
        ],
        'R' => [
            0b11110, 0b10001, 0b10001, 0b11110, 0b10100, 0b10010, 0b10001, 0,
        ],
        'S' => [
            0b01111, 0b10000, 0b10000, 0b01110, 0b00001, 0b00001, 0b11110, 0,
        ],
        'T' => [
            0b11111, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0,
        ],
        'U' => [
            0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01110, 0,
        ],
        'V' => [
            0b10001, 0b10001, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0,
        ],
        'W' => [
            0b10001, 0b10001, 0b10001, 0b10101, 0b10101, 0b10101, 0b01010, 0,
        ],
        'X' => [
            0b10001, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0b10001, 0,
        ],
        'Y' => [
            0b10001, 0b10001, 0b01010, 0b00100, 0b00100, 0b00100, 0b00100, 0,
        ],
        'Z' => [
            0b11111, 0b00001, 0b00010, 0b00100, 0b01000, 0b10000, 0b11111, 0,
        ],
        '[' => [
            0b01110, 0b01000, 0b01000, 0b01000, 0b01000, 0b01000, 0b01110, 0,
        ],
        '\\' => [0, 0b10000, 0b01000, 0b00100, 0b00010, 0b00001, 0, 0],
        ']' => [
            0b01110, 0b00010, 0b00010, 0b00010, 0b00010, 0b00010, 0b01110, 0,
        ],
        '^' => [0b00100, 0b01010, 0b10001, 0, 0, 0, 0, 0],
        '_' => [0, 0, 0, 0, 0, 0, 0, 0b11111],
        '`' => [0b01000, 0b00100, 0, 0, 0, 0, 0, 0],
        'a' => [0, 0, 0b01110, 0b00001, 0b01111, 0b10001, 0b01111, 0],
        'b' => [
            0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b11110, 0,
        ],
        'c' => [0, 0, 0b01110, 0b10000, 0b10000, 0b10001, 0b01110, 0],
        'd' => [
            0b00001, 0b00001, 0b01101, 0b10011, 0b10001, 0b10001, 0b01111, 0,
        ],
        'e' => [0, 0, 0b01110, 0b10001, 0b11111, 0b10000, 0b01110, 0],
        'f' => [
            0b00110, 0b01001, 0b01000, 0b11100, 0b01000, 0b01000, 0b01000, 0,
        ],
        'g' => [0, 0, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110],
        'h' => [
            0b10000, 0b10000, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001, 0,
        ],
        'i' => [0b00100, 0, 0b01100, 0b00100, 0b00100, 0b00100, 0b01110, 0],
        'j' => [
            0b00010, 0, 0b00110, 0b00010, 0b00010, 0b00010, 0b10010, 0b01100,
        ],
        'k' => [
            0b10000, 0b10000, 0b10010, 0b10100, 0b11000, 0b10100, 0b10010, 0,
        ],
        'l' => [
            0b01100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b01110, 0,
        ],
        'm' => [0, 0, 0b11010, 0b10101, 0b10101, 0b10101, 0b10101, 0],
        'n' => [0, 0, 0b10110, 0b11001, 0b10001, 0b10001, 0b10001, 0],
        'o' => [0, 0, 0b01110, 0b10001, 0b10001, 0b10001, 0b01110, 0],
        'p' => [0, 0, 0b11110, 0b10001, 0b10001, 0b11110, 0b10000, 0b10000],
        'q' => [0, 0, 0b01111, 0b10001, 0b10001, 0b01111, 0b00001, 0b00001],
        'r' => [0, 0, 0b10110, 0b11001, 0b10000, 0b10000, 0b10000, 0],
        's' => [0, 0, 0b01111, 0b10000, 0b01110, 0b00001, 0b11110, 0],
        't' => [
            0b01000, 0b01000, 0b11100, 0b01000, 0b01000, 0b01001, 0b00110, 0,
        ],
        'u' => [0, 0, 0b10001, 0b10001, 0b10001, 0b10011, 0b01101, 0],
        'v' => [0, 0, 0b10001, 0b10001, 0b10001, 0b01010, 0b00100, 0],
        'w' => [0, 0, 0b10001, 0b10001, 0b10101, 0b10101, 0b01010, 0],
        'x' => [0, 0, 0b10001, 0b01010, 0b00100, 0b01010, 0b10001, 0],
        'y' => [0, 0, 0b10001, 0b10001, 0b10001, 0b01111, 0b00001, 0b01110],
        'z' => [0, 0, 0b11111, 0b00010, 0b00100, 0b01000, 0b11111, 0],
        '{' => [
            0b00010, 0b00100, 0b00100, 0b01000, 0b00100, 0b00100, 0b00010, 0,
        ],
        '|' => [
            0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0b00100, 0,
        ],
        '}' => [
            0b01000, 0b00100, 0b00100, 0b00010, 0b00100, 0b00100, 0b01000, 0,
        ],
        '~' => [0, 0, 0b01000, 0b10101, 0b00010, 0, 0, 0],
        _ => MISSING,
    }
}

/// Which way text runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    /// Left to right; the anchor is the top-left corner of the first glyph.
    Right,
    /// Bottom to top (rotated a quarter turn anticlockwise); the anchor is the
    /// bottom-left corner of the first glyph's cell as drawn.
    Up,
}

/// An RGB image, 3 bytes per pixel, rows top to bottom.
pub(super) struct Canvas<'a> {
    /// The pixels.
    pub(super) pixels: &'a mut [u8],
    /// Pixels per row.
    pub(super) width: u32,
    /// Rows.
    pub(super) height: u32,
}

impl Canvas<'_> {
    /// Sets the pixel at (`x`, `y`) to `colour`; pixels off the canvas are ignored.
    fn set(&mut self, x: i64, y: i64, colour: [u8; 3]) {
        if x < 0 || y < 0 || x >= i64::from(self.width) || y >= i64::from(self.height) {
            return;
        }
        let at = 3 * (y as usize * self.width as usize + x as usize);
        if let Some(pixel) = self.pixels.get_mut(at..at + 3) {
            pixel.copy_from_slice(&colour);
        }
    }

    /// Draws `text` at `anchor` (see [`Direction`]), each font pixel a `scale` x
    /// `scale` square.
    pub(super) fn draw_text(
        &mut self,
        text: &str,
        anchor: (i64, i64),
        scale: u32,
        colour: [u8; 3],
        direction: Direction,
    ) {
        let scale = i64::from(scale.max(1));
        for (index, c) in text.chars().enumerate() {
            let along = index as i64 * i64::from(ADVANCE) * scale;
            for (row, bits) in glyph(c).iter().enumerate() {
                for column in 0..GLYPH_WIDTH {
                    if bits & (1 << (GLYPH_WIDTH - 1 - column)) == 0 {
                        continue;
                    }
                    let (u, v) = (along + i64::from(column) * scale, row as i64 * scale);
                    for dy in 0..scale {
                        for dx in 0..scale {
                            let (x, y) = match direction {
                                Direction::Right => (anchor.0 + u + dx, anchor.1 + v + dy),
                                Direction::Up => (anchor.0 + v + dy, anchor.1 - u - dx),
                            };
                            self.set(x, y, colour);
                        }
                    }
                }
            }
        }
    }
}

/// Length in pixels of `text` along its direction at `scale` (no trailing gap).
pub(super) fn text_length(text: &str, scale: u32) -> u32 {
    let count = text.chars().count() as u32;
    (count * ADVANCE).saturating_sub(1) * scale.max(1)
}

/// Thickness in pixels of a line of text at `scale`.
pub(super) fn text_thickness(scale: u32) -> u32 {
    GLYPH_HEIGHT * scale.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every printable ASCII character has a glyph of its own: none is the missing box
    /// and no two are the same, and none reaches past 5 columns.
    #[test]
    fn printable_ascii_glyphs_are_distinct() {
        let printable: Vec<char> = (0x20u8..0x7f).map(char::from).collect();
        for (i, &a) in printable.iter().enumerate() {
            assert_ne!(glyph(a), MISSING, "{a:?} has no glyph");
            assert!(glyph(a).iter().all(|&row| row < 1 << GLYPH_WIDTH), "{a:?}");
            for &b in &printable[i + 1..] {
                assert_ne!(glyph(a), glyph(b), "{a:?} and {b:?} look the same");
            }
        }
        assert_eq!(glyph('é'), MISSING);
    }

    /// "1" at scale 2 sets exactly the glyph's pixels, doubled, and the upward
    /// direction draws the same pixels rotated.
    #[test]
    fn text_is_drawn_pixel_for_pixel() {
        let (width, height) = (20u32, 20u32);
        let mut pixels = vec![0u8; (3 * width * height) as usize];
        let mut canvas = Canvas {
            pixels: &mut pixels,
            width,
            height,
        };
        canvas.draw_text("1", (1, 2), 2, [255, 0, 0], Direction::Right);
        let lit = |pixels: &[u8], x: u32, y: u32| pixels[(3 * (y * width + x)) as usize] == 255;
        let count = (0..width * height)
            .filter(|&i| lit(&pixels, i % width, i / width))
            .count();
        let glyph_pixels: u32 = glyph('1').iter().map(|row| row.count_ones()).sum();
        assert_eq!(count as u32, 4 * glyph_pixels);
        // Row 0 of "1" is 00100: column 2, drawn at x = 1 + 2 * 2.
        assert!(lit(&pixels, 5, 2) && lit(&pixels, 6, 3));
        assert!(!lit(&pixels, 3, 2));

        let mut rotated = vec![0u8; (3 * width * height) as usize];
        let mut canvas = Canvas {
            pixels: &mut rotated,
            width,
            height,
        };
        canvas.draw_text("1", (2, 18), 2, [255, 0, 0], Direction::Up);
        for y in 0..height {
            for x in 0..width {
                // Unrotated (u, v) = (x - 1, y - 2) maps to (2 + v, 18 - u).
                if lit(&pixels, x, y) {
                    assert!(lit(&rotated, 2 + (y - 2), 18 - (x - 1)), "({x}, {y})");
                }
            }
        }
        assert_eq!(text_length("12", 2), 22);
    }
}
