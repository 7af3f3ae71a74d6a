//! SVG line plots of a measure over time, one line per arm, with the
//! scenario's event marked by a vertical line.

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// One line: its label and (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// What to draw.
#[derive(Debug, Clone)]
pub struct LinePlot<'a> {
    /// The caption.
    pub title: &'a str,
    /// The y axis' label.
    pub y_label: &'a str,
    /// The lines.
    pub series: &'a [Series],
    /// The event's time, if any.
    pub event_s: Option<f64>,
    /// A fixed y range (else 0 to the data's maximum plus a margin).
    pub y_max: Option<f64>,
}

/// Writes `plot` as an SVG file at `path`.
pub fn write_svg(path: &Path, plot: &LinePlot) -> anyhow::Result<()> {
    draw(path, plot).map_err(|e| anyhow!("drawing {}: {e}", path.display()))
}

fn draw(path: &Path, plot: &LinePlot) -> Result<(), Box<dyn std::error::Error>> {
    let points = plot.series.iter().flat_map(|(_, p)| p.iter());
    let (x_max, data_y_max) = points.fold((1.0f64, 0.0f64), |(x, y), p| (x.max(p.0), y.max(p.1)));
    let x_max = plot.event_s.map_or(x_max, |e| x_max.max(e)) * 1.02;
    let y_max = plot.y_max.unwrap_or(if data_y_max > 0.0 {
        data_y_max * 1.1
    } else {
        1.0
    });
    let root = SVGBackend::new(path, (960, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(plot.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time since start (s)")
        .y_desc(plot.y_label)
        .draw()?;
    for (i, (label, pts)) in plot.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
    }
    if let Some(t) = plot.event_s {
        chart
            .draw_series(LineSeries::new(
                [(t, 0.0), (t, y_max)],
                BLACK.stroke_width(1),
            ))?
            .label("event")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_lines_and_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let series = vec![
            ("a ×1".to_owned(), vec![(2.5, 0.1), (7.5, 0.6)]),
            ("b ×2".to_owned(), vec![(2.5, 0.0), (7.5, 0.2)]),
        ];
        write_svg(
            &path,
            &LinePlot {
                title: "hit rate",
                y_label: "hit rate",
                series: &series,
                event_s: Some(5.0),
                y_max: Some(1.0),
            },
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("a ×1"));
        assert!(svg.contains("event"));
        assert!(svg.matches("<polyline").count() >= 3);
        // Empty data still renders.
        write_svg(
            &path,
            &LinePlot {
                title: "t",
                y_label: "y",
                series: &[],
                event_s: None,
                y_max: None,
            },
        )
        .unwrap();
    }
}
