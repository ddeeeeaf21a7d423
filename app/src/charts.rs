//! Server-rendered SVG charts, written in `view!` so the server's HTML and the hydrated
//! page are the same, with no chart library and nothing fetched from elsewhere.

use crate::format::thousands;
use leptos::prelude::*;

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 210.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;

/// A round axis maximum at or above `max`: 1, 2 or 5 times a power of ten.
pub fn nice_max(max: i64) -> i64 {
    if max <= 0 {
        return 1;
    }
    let mut step = 1i64;
    loop {
        for m in [1, 2, 5] {
            if let Some(candidate) = step.checked_mul(m) {
                if candidate >= max {
                    return candidate;
                }
            } else {
                return max;
            }
        }
        step = match step.checked_mul(10) {
            Some(s) => s,
            None => return max,
        };
    }
}

/// One stacked series of a bar chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: &'static str,
    /// CSS class of its bars (and legend swatch).
    pub class: &'static str,
    pub values: Vec<i64>,
}

/// Stacked bars over time with a y axis (0, half, max in `unit`) and the first, middle and
/// last bucket's time under the x axis. `labels` are the buckets' start times as shown.
#[component]
pub fn BarChart(
    title: String,
    unit: &'static str,
    labels: Vec<String>,
    series: Vec<Series>,
    #[prop(optional)] id: &'static str,
) -> impl IntoView {
    let n = labels.len().max(1);
    let totals: Vec<i64> = (0..n)
        .map(|i| {
            series
                .iter()
                .map(|s| s.values.get(i).copied().unwrap_or(0))
                .sum()
        })
        .collect();
    let max = nice_max(totals.iter().copied().max().unwrap_or(0));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / n as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let y = move |v: i64| TOP + plot_h - plot_h * (v as f64 / max as f64);
    let mut bars = Vec::new();
    for i in 0..n {
        let mut base = 0i64;
        let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
        for s in &series {
            let v = s.values.get(i).copied().unwrap_or(0);
            if v > 0 {
                let (top, bottom) = (y(base + v), y(base));
                let tip = format!(
                    "{}: {} {} {unit}",
                    labels.get(i).cloned().unwrap_or_default(),
                    v,
                    s.name
                );
                bars.push(view! {
                    <rect class=s.class x=format!("{x:.1}") y=format!("{top:.1}")
                        width=format!("{bar_w:.1}") height=format!("{:.1}", (bottom - top).max(0.5))>
                        <title>{tip}</title>
                    </rect>
                });
            }
            base += v;
        }
    }
    let ticks = [0, max / 2, max].map(|v| {
        let ty = y(v);
        view! {
            <line class="grid" x1=LEFT x2=WIDTH - RIGHT y1=format!("{ty:.1}") y2=format!("{ty:.1}")/>
            <text class="tick" x=LEFT - 6.0 y=format!("{:.1}", ty + 4.0) text-anchor="end">{thousands(v)}</text>
        }
    });
    let x_labels = [0, n / 2, n - 1].map(|i| {
        let x = LEFT + slot * i as f64 + slot / 2.0;
        let anchor = if i == 0 {
            "start"
        } else if i == n - 1 {
            "end"
        } else {
            "middle"
        };
        view! {
            <text class="tick" x=format!("{x:.1}") y=HEIGHT - 8.0 text-anchor=anchor>
                {labels.get(i).cloned().unwrap_or_default()}
            </text>
        }
    });
    let legend = series
        .iter()
        .map(|s| view! { <span class="legend-item"><span class=format!("swatch {}", s.class)></span>{s.name}</span> })
        .collect_view();
    let total: i64 = totals.iter().sum();
    let aria = format!(
        "{title}: {} {unit} in total over {n} bars",
        thousands(total)
    );
    view! {
        <figure class="chart" id=id>
            <figcaption>
                <span class="chart-title">{title}</span>
                <span class="chart-unit">{format!("({unit})")}</span>
                <span class="legend">{legend}</span>
            </figcaption>
            <svg viewBox=format!("0 0 {WIDTH} {HEIGHT}") role="img" aria-label=aria>
                {ticks}
                <line class="axis" x1=LEFT x2=LEFT y1=TOP y2=TOP + plot_h/>
                <line class="axis" x1=LEFT x2=WIDTH - RIGHT y1=TOP + plot_h y2=TOP + plot_h/>
                {bars}
                {x_labels}
            </svg>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(0), 1);
        assert_eq!(nice_max(1), 1);
        assert_eq!(nice_max(3), 5);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(4_999), 5_000);
        assert_eq!(nice_max(i64::MAX), i64::MAX);
    }
}
