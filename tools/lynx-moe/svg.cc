#include "svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lynx::cli {
namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else
      o += c;
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string text(double x, double y, const std::string& s, const char* anchor = "middle",
                 int size = 12, const char* extra = "") {
  char b[128];
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\" %s>",
                x, y, size, anchor, extra);
  return std::string(b) + esc(s) + "</text>\n";
}

// A "nice" step for about `n` ticks over [lo, hi].
double nice_step(double lo, double hi, int n) {
  const double raw = (hi - lo) / n;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& xlabel,
                           const std::string& ylabel, const std::vector<Series>& series, double x0,
                           double y0, double w, double h) {
  double xmin = 1e300, xmax = -1e300, ymax = 0;
  for (const auto& s : series) {
    for (double x : s.x) xmin = std::min(xmin, x), xmax = std::max(xmax, x);
    for (double y : s.y) ymax = std::max(ymax, y);
  }
  if (xmin > xmax) return "";
  const double lx0 = std::log2(std::max(xmin, 1e-9)), lx1 = std::log2(std::max(xmax, xmin * 2));
  const double step = nice_step(0, ymax > 0 ? ymax : 1, 5);
  const double ytop = std::ceil((ymax > 0 ? ymax : 1) / step) * step;
  const double px0 = x0 + 60, px1 = x0 + w - 190, py0 = y0 + h - 45, py1 = y0 + 30;
  auto X = [&](double x) { return px0 + (std::log2(x) - lx0) / (lx1 - lx0) * (px1 - px0); };
  auto Y = [&](double y) { return py0 - y / ytop * (py0 - py1); };
  std::string o = text(x0 + w / 2 - 60, y0 + 18, title, "middle", 14, "font-weight=\"bold\"");
  o += "<rect x=\"" + fmt("%.1f", px0) + "\" y=\"" + fmt("%.1f", py1) + "\" width=\"" +
       fmt("%.1f", px1 - px0) + "\" height=\"" + fmt("%.1f", py0 - py1) +
       "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double y = 0; y <= ytop + 1e-9; y += step) {
    o += "<line x1=\"" + fmt("%.1f", px0) + "\" x2=\"" + fmt("%.1f", px1) + "\" y1=\"" +
         fmt("%.1f", Y(y)) + "\" y2=\"" + fmt("%.1f", Y(y)) + "\" stroke=\"#ddd\"/>\n";
    o += text(px0 - 6, Y(y) + 4, fmt(step < 1 ? "%.2f" : "%.0f", y), "end", 11);
  }
  std::vector<double> xs;
  for (const auto& s : series) xs.insert(xs.end(), s.x.begin(), s.x.end());
  std::sort(xs.begin(), xs.end());
  xs.erase(std::unique(xs.begin(), xs.end()), xs.end());
  for (double x : xs) o += text(X(x), py0 + 16, fmt("%g", x), "middle", 11);
  o += text((px0 + px1) / 2, py0 + 36, xlabel, "middle", 12);
  o += text(x0 + 14, (py0 + py1) / 2, ylabel, "middle", 12,
            ("transform=\"rotate(-90 " + fmt("%.1f", x0 + 14) + " " + fmt("%.1f", (py0 + py1) / 2) +
             ")\"")
                .c_str());
  for (size_t i = 0; i < series.size(); ++i) {
    const auto& s = series[i];
    const char* c = kColors[i % 10];
    std::string pts;
    for (size_t j = 0; j < s.x.size(); ++j)
      pts += fmt("%.1f", X(s.x[j])) + "," + fmt("%.1f", Y(s.y[j])) + " ";
    o += std::string("<polyline fill=\"none\" stroke=\"") + c + "\" stroke-width=\"2\" points=\"" +
         pts + "\"/>\n";
    for (size_t j = 0; j < s.x.size(); ++j) {
      o += std::string("<circle r=\"3\" fill=\"") + c + "\" cx=\"" + fmt("%.1f", X(s.x[j])) +
           "\" cy=\"" + fmt("%.1f", Y(s.y[j])) + "\"/>\n";
    }
    const double ly = py1 + 10 + 18 * double(i);
    o += std::string("<line stroke=\"") + c + "\" stroke-width=\"3\" x1=\"" +
         fmt("%.1f", px1 + 12) + "\" x2=\"" + fmt("%.1f", px1 + 32) + "\" y1=\"" + fmt("%.1f", ly) +
         "\" y2=\"" + fmt("%.1f", ly) + "\"/>\n";
    o += text(px1 + 36, ly + 4, s.name.size() > 24 ? s.name.substr(0, 24) : s.name, "start", 11);
  }
  return o;
}

std::string svg_heatmap(const std::string& title, const std::string& row_label,
                        const std::string& col_label, const std::vector<std::vector<double>>& v,
                        double x0, double y0, double w, double h) {
  if (v.empty() || v[0].empty()) return "";
  const size_t R = v.size(), C = v[0].size();
  double mx = 0;
  for (const auto& r : v)
    for (double x : r) mx = std::max(mx, x);
  const double px0 = x0 + 60, px1 = x0 + w - 20, py0 = y0 + 30, py1 = y0 + h - 40;
  const double cw = (px1 - px0) / double(C), ch = (py1 - py0) / double(R);
  std::string o = text(x0 + w / 2, y0 + 18, title, "middle", 14, "font-weight=\"bold\"");
  for (size_t r = 0; r < R; ++r) {
    for (size_t c = 0; c < C; ++c) {
      const double t = mx > 0 ? v[r][c] / mx : 0;  // white (0) to dark blue (max)
      const int R8 = int(255 - t * 225), G8 = int(255 - t * 180), B8 = int(255 - t * 75);
      char col[16];
      std::snprintf(col, sizeof col, "#%02x%02x%02x", R8, G8, B8);
      o += "<rect x=\"" + fmt("%.2f", px0 + double(c) * cw) + "\" y=\"" +
           fmt("%.2f", py0 + double(r) * ch) + "\" width=\"" + fmt("%.2f", cw + 0.2) +
           "\" height=\"" + fmt("%.2f", ch + 0.2) + "\" fill=\"" + col + "\"/>\n";
    }
    o += text(px0 - 6, py0 + (double(r) + 0.6) * ch, std::to_string(r), "end", 10);
  }
  for (size_t c = 0; c < C; c += std::max<size_t>(1, C / 16)) {
    o += text(px0 + (double(c) + 0.5) * cw, py1 + 14, std::to_string(c), "middle", 10);
  }
  o += text((px0 + px1) / 2, py1 + 32,
            col_label + " (darker = more tokens; max " + fmt("%.0f", mx) + ")", "middle", 12);
  o += text(x0 + 14, (py0 + py1) / 2, row_label, "middle", 12,
            ("transform=\"rotate(-90 " + fmt("%.1f", x0 + 14) + " " + fmt("%.1f", (py0 + py1) / 2) +
             ")\"")
                .c_str());
  return o;
}

std::string svg_document(double w, double h, const std::string& body) {
  return "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fmt("%.0f", w) + "\" height=\"" +
         fmt("%.0f", h) +
         "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
         "fill=\"white\"/>\n" +
         body + "</svg>\n";
}

}  // namespace lynx::cli
