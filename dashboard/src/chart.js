// A uPlot time-series chart as a Preact component: made once, then fed new
// data each second (setData), resized with its box.
import { h } from "preact";
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export function Chart({ title, series, data, unit, testid }) {
  const box = useRef(null);
  const plot = useRef(null);

  useEffect(() => {
    const el = box.current;
    const opts = {
      title,
      width: Math.max(300, el.clientWidth),
      height: 200,
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true } },
      axes: [{}, { label: unit, size: 60 }],
      series: [
        {},
        ...series.map((s) => ({
          label: s.label,
          stroke: s.color,
          width: 2,
          fill: s.fill,
          spanGaps: false,
          // a lone second between empty ones is a point, not an invisible line
          points: { show: true, size: 4 },
        })),
      ],
    };
    plot.current = new uPlot(opts, data, el);
    const ro = new ResizeObserver(() => {
      if (plot.current) plot.current.setSize({ width: Math.max(300, el.clientWidth), height: 200 });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      plot.current.destroy();
      plot.current = null;
    };
  }, []);

  useEffect(() => {
    if (plot.current) plot.current.setData(data);
  }, [data]);

  return h("div", { class: "chart", ref: box, "data-testid": testid });
}
