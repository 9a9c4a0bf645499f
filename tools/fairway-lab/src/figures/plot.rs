//! PNG line charts of benchmark series (shares over time, latency CDFs)
//! and grouped bar charts of figures per case, drawn with `plotters`. Text needs a TrueType font: the first of a few
//! common paths, or the file named by `FAIRWAY_PLOT_FONT`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, anyhow, bail};
use plotters::prelude::*;

/// One line of a chart.
#[derive(Clone, Debug)]
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Drawn thin and light, for targets and baselines.
    pub reference: bool,
    /// The colour's index; by default the series' position.
    pub colour: Option<usize>,
}

impl Series {
    pub(crate) fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { name: name.into(), points, reference: false, colour: None }
    }

    pub(crate) fn coloured(mut self, index: usize) -> Series {
        self.colour = Some(index);
        self
    }

    pub(crate) fn reference(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series { reference: true, ..Series::new(name, points) }
    }
}

/// A chart: one or more panels side by side, sharing the y range.
#[derive(Clone, Debug)]
pub(crate) struct Chart {
    pub file: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<(String, Vec<Series>)>,
    /// Log scale on x (latencies).
    pub log_x: bool,
    /// Log scale on y (shares spanning orders of magnitude); y values must
    /// be above zero.
    pub log_y: bool,
}

/// Grouped bars: for each category (a forge, say) one bar per group, with
/// horizontal reference lines (a target, zero).
#[derive(Clone, Debug)]
pub(crate) struct Bars {
    pub file: String,
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// Each group's name and its value per category (in `categories`' order).
    pub groups: Vec<(String, Vec<f64>)>,
    /// Each line's name and height.
    pub lines: Vec<(String, f64)>,
}

const FONT_PATHS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let chosen = std::env::var("FAIRWAY_PLOT_FONT").ok();
            let candidates = chosen.iter().map(String::as_str).chain(FONT_PATHS);
            for path in candidates {
                if let Ok(bytes) = std::fs::read(path) {
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    return plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                        .map_err(|_| format!("{path} is not a TrueType font"));
                }
            }
            Err(format!(
                "no TrueType font for the plots (looked for {}); set FAIRWAY_PLOT_FONT to a .ttf file \
                 or install fonts-dejavu-core",
                FONT_PATHS.join(", ")
            ))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}

const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Draws `chart` into `dir` and returns the file's path.
pub(crate) fn draw(chart: &Chart, dir: &Path) -> anyhow::Result<PathBuf> {
    register_font()?;
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join(&chart.file);
    draw_into(chart, &path)?;
    Ok(path)
}

fn draw_into(chart: &Chart, path: &Path) -> anyhow::Result<()> {
    let width = (640 * chart.panels.len() as u32).max(900);
    let root = BitMapBackend::new(path, (width, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let root = root.titled(&chart.title, ("sans-serif", 22)).map_err(plot_error)?;
    let all = chart.panels.iter().flat_map(|(_, s)| s).flat_map(|s| &s.points);
    let (mut x_max, mut y_max, mut x_min, mut y_min) = (f64::MIN, f64::MIN, f64::MAX, f64::MAX);
    for &(x, y) in all {
        x_max = x_max.max(x);
        x_min = x_min.min(x);
        y_max = y_max.max(y);
        if y > 0.0 {
            y_min = y_min.min(y);
        }
    }
    if x_max == f64::MIN {
        bail!("{}: no points to plot", chart.file);
    }
    let y_max = y_max * 1.08;
    let areas = root.split_evenly((1, chart.panels.len()));
    for ((panel_title, series), area) in chart.panels.iter().zip(areas) {
        let mut builder = ChartBuilder::on(&area);
        builder.caption(panel_title, ("sans-serif", 17)).margin(12).x_label_area_size(38).y_label_area_size(56);
        if chart.log_y {
            let y_range = (y_min.min(y_max) / 1.5..y_max * 1.5).log_scale();
            let mut ctx = builder.build_cartesian_2d(x_min.min(0.0)..x_max, y_range).map_err(plot_error)?;
            ctx.configure_mesh().x_desc(&chart.x_label).y_desc(&chart.y_label).draw().map_err(plot_error)?;
            draw_series(&mut ctx, series)?;
        } else if chart.log_x {
            let mut ctx = builder
                .build_cartesian_2d((x_min.max(1e-3)..x_max * 1.1).log_scale(), 0.0..y_max)
                .map_err(plot_error)?;
            ctx.configure_mesh().x_desc(&chart.x_label).y_desc(&chart.y_label).draw().map_err(plot_error)?;
            draw_series(&mut ctx, series)?;
        } else {
            let mut ctx = builder.build_cartesian_2d(x_min.min(0.0)..x_max, 0.0..y_max).map_err(plot_error)?;
            ctx.configure_mesh().x_desc(&chart.x_label).y_desc(&chart.y_label).draw().map_err(plot_error)?;
            draw_series(&mut ctx, series)?;
        }
    }
    root.present().map_err(plot_error)
}

/// Draws `bars` into `dir` and returns the file's path.
pub(crate) fn draw_bars(bars: &Bars, dir: &Path) -> anyhow::Result<PathBuf> {
    register_font()?;
    if bars.categories.is_empty() || bars.groups.iter().any(|(_, v)| v.len() != bars.categories.len()) {
        bail!("{}: every group needs one value per category", bars.file);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let path = dir.join(&bars.file);
    draw_bars_into(bars, &path)?;
    Ok(path)
}

fn draw_bars_into(bars: &Bars, path: &Path) -> anyhow::Result<()> {
    let width = (110 * bars.categories.len() as u32 * bars.groups.len().max(1) as u32).clamp(700, 1600);
    let root = BitMapBackend::new(path, (width, 460)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_error)?;
    let values = bars.groups.iter().flat_map(|(_, v)| v).chain(bars.lines.iter().map(|(_, y)| y));
    let (low, high) = values.fold((0.0f64, 0.0f64), |(lo, hi), &y| (lo.min(y), hi.max(y)));
    let span = (high - low).max(1.0);
    // Room above the bars for the legend.
    let slots = bars.categories.len() as f64;
    let mut ctx = ChartBuilder::on(&root)
        .caption(&bars.title, ("sans-serif", 20))
        .margin(14)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..slots, (low - 0.1 * span)..(high + 0.45 * span))
        .map_err(plot_error)?;
    let categories = bars.categories.clone();
    ctx.configure_mesh()
        .disable_x_mesh()
        .x_labels(categories.len() * 2 + 1)
        .x_label_formatter(&move |x: &f64| {
            // Only the middle of each category's slot is named.
            let slot = x.floor();
            if (x - slot - 0.5).abs() < 1e-6 {
                categories.get(slot as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(&bars.y_label)
        .draw()
        .map_err(plot_error)?;
    let width = 0.8 / bars.groups.len().max(1) as f64;
    for (g, (name, values)) in bars.groups.iter().enumerate() {
        let colour = COLOURS[g % COLOURS.len()];
        let rects = values.iter().enumerate().map(move |(c, &y)| {
            let left = c as f64 + 0.1 + g as f64 * width;
            Rectangle::new([(left, 0.0), (left + width * 0.92, y)], colour.filled())
        });
        ctx.draw_series(rects)
            .map_err(plot_error)?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
    }
    for (i, (name, y)) in bars.lines.iter().enumerate() {
        let colour = if i == 0 { BLACK.mix(0.6) } else { COLOURS[(bars.groups.len() + i) % COLOURS.len()].mix(0.9) };
        ctx.draw_series(LineSeries::new([(0.0, *y), (slots, *y)], colour.stroke_width(1)))
            .map_err(plot_error)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(1)));
    }
    draw_legend(&mut ctx, SeriesLabelPosition::UpperRight)?;
    root.present().map_err(plot_error)
}

fn draw_series<'a, X, Y>(
    ctx: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    series: &[Series],
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, line) in series.iter().enumerate() {
        let colour = COLOURS[line.colour.unwrap_or(i) % COLOURS.len()];
        let style = if line.reference { colour.mix(0.45).stroke_width(1) } else { colour.stroke_width(2) };
        ctx.draw_series(LineSeries::new(line.points.iter().copied(), style))
            .map_err(plot_error)?
            .label(&line.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
    }
    draw_legend(ctx, SeriesLabelPosition::LowerRight)
}

fn draw_legend<'a, X, Y>(
    ctx: &mut ChartContext<'a, BitMapBackend<'a>, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    ctx.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(position)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(plot_error)
}

fn plot_error<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow!("drawing a plot: {error:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars(groups: Vec<(String, Vec<f64>)>) -> Bars {
        Bars {
            file: "bars.png".into(),
            title: "a test".into(),
            y_label: "change (%)".into(),
            categories: vec!["g1".into(), "g2".into()],
            groups,
            lines: vec![("zero".into(), 0.0), ("target".into(), -30.0)],
        }
    }

    #[test]
    fn bars_below_and_above_zero_make_a_png_and_a_missing_value_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let groups = vec![("lag".to_owned(), vec![-42.0, 12.5]), ("useless".to_owned(), vec![-8.0, -61.0])];
        let path = draw_bars(&bars(groups), dir.path()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{} is a PNG", path.display());
        let short = vec![("lag".to_owned(), vec![-42.0])];
        let error = draw_bars(&bars(short), dir.path()).unwrap_err();
        assert!(error.to_string().contains("one value per category"), "{error}");
    }
}
