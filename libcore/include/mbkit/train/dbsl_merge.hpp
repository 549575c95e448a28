// How the DBSL parameter server combines a worker's model with its own (algorithms.md §3.4):
// model averaging with an update factor f, applied to every parameter and to the batch-norm
// statistics alike.
//
//   asynchronous (each push at once):  w = ((2 - f) w + f w_k) / 2
//   --sync (all workers' pushes):      w = sum_i f_i w_i / sum_i f_i
//
// f is 1 for a large worker; for a small one d_S / d_L (--update-factor linear, the paper's
// choice), its square root (sqrt) or 1 (none): a small worker saw fewer samples, so its model
// moves the server's less.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace mbkit::train {

enum class UpdateFactor { kLinear, kSqrt, kNone };

/// --update-factor: linear, sqrt or none; a usage error otherwise.
UpdateFactor parse_update_factor(const std::string& text);
const char* update_factor_name(UpdateFactor kind);

/// f of a worker whose samples per round are `ratio` = d / d_L of a large worker's (1 for a
/// large worker, whatever the kind).
double update_factor(UpdateFactor kind, double ratio);

/// w = ((2 - f) w + f w_k) / 2, element by element (in double).
void merge_push(std::span<float> server, std::span<const float> worker, double f);

/// w = sum_i f_i w_i / sum_i f_i over the workers' models (all the server's size).
void merge_sync(std::span<float> server, const std::vector<std::span<const float>>& workers,
                const std::vector<double>& factors);

/// merge_sync in parts, for workers' models spread over processes in worker order (ranks
/// hosting shares of --emulate's workers): `sums` (zeros before the first part) += f_i w_i
/// over one part's models, in order, element by element; passed on from part to part, the
/// additions are merge_sync's, in its order.
void add_weighted(std::span<double> sums, const std::vector<std::span<const float>>& workers,
                  const std::vector<double>& factors);
/// add_weighted of one model, `sums` += f w element by element: a worker's push added as it
/// is taken (--sync keeps none), in worker order, the same additions as merge_sync's.
void add_weighted(std::span<double> sums, std::span<const float> worker, double factor);

/// The merged model from the sums over every part: w = sums / sum_i f_i (`factors`: every
/// worker's, in worker order), merge_sync's bits.
void divide_weighted(std::span<float> server, std::span<const double> sums,
                     const std::vector<double>& factors);

}  // namespace mbkit::train
