// Plain SVG charts written by the project (no plotting library, no browser needed):
// line charts of a metric versus batch size per series, and a heatmap.
#pragma once
#include <string>
#include <vector>

namespace lynx::cli {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// A line chart with a log2 x axis (batch sizes), placed at (x0, y0) with size w x h.
std::string svg_line_chart(const std::string& title, const std::string& xlabel,
                           const std::string& ylabel, const std::vector<Series>& series, double x0,
                           double y0, double w, double h);
// A heatmap of values[row][col] (e.g. layer x expert token counts).
std::string svg_heatmap(const std::string& title, const std::string& row_label,
                        const std::string& col_label,
                        const std::vector<std::vector<double>>& values, double x0, double y0,
                        double w, double h);
// Wraps chart fragments into a document of the given size.
std::string svg_document(double w, double h, const std::string& body);

}  // namespace lynx::cli
