// A custom training loop with Yoke's public API (docs/cpp_api.md), the C++
// counterpart of a TensorFlow GradientTape loop under a distribution
// strategy: the loop is ours; the context only keeps the ranks in step
// (rank 0's initial parameters, and the mean gradient over the global batch).
//
// Trains an MLP on Fashion-MNIST and prints, per epoch on rank 0, the
// training loss and test accuracy, then on every rank one machine-readable
// line:
//   final rank=0 world_size=2 test_accuracy=0.8612 params_checksum=0123abcd...
//
// Usage: custom_loop [--data-dir=DIR] [--epochs=N] [--batch-size=N] [--lr=X]
//                    [--train-examples=N]
// DIR holds the four Fashion-MNIST IDX files (default: $YOKE_FASHION_MNIST_DIR,
// else /usr/share/datasets/fashion-mnist). One process trains alone; for N
// ranks start N processes with YOKE_RANK, YOKE_WORLD_SIZE and
// YOKE_RENDEZVOUS=file:DIR (a fresh directory they all see).
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "yoke/yoke.h"

namespace {

struct Args {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 5;
  int64_t batch_size = 64;  // global: split over the ranks
  float lr = 0.02f;
  int64_t train_examples = 0;  // 0: all 60,000
};

absl::StatusOr<Args> ParseArgs(int argc, char** argv) {
  Args a;
  if (const char* d = std::getenv("YOKE_FASHION_MNIST_DIR"); d != nullptr && *d != '\0') {
    a.data_dir = d;
  }
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq),
                      value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    char* end = nullptr;
    if (key == "--data-dir" && !value.empty()) {
      a.data_dir = value;
      continue;
    } else if (key == "--epochs") {
      a.epochs = static_cast<int>(std::strtol(value.c_str(), &end, 10));
    } else if (key == "--batch-size") {
      a.batch_size = std::strtoll(value.c_str(), &end, 10);
    } else if (key == "--lr") {
      a.lr = std::strtof(value.c_str(), &end);
    } else if (key == "--train-examples") {
      a.train_examples = std::strtoll(value.c_str(), &end, 10);
    }
    if (end == nullptr || end == value.c_str() || *end != '\0') {
      return absl::InvalidArgumentError("bad argument '" + arg +
                                        "' (known: --data-dir=DIR --epochs=N --batch-size=N "
                                        "--lr=X --train-examples=N)");
    }
  }
  return a;
}

// The `data:` section of a job spec, as a job file would hold it.
std::string DataYaml(const Args& a) {
  auto file = [&a](const char* name) { return a.data_dir + "/" + name; };
  std::string cap;
  if (a.train_examples > 0) cap = ", num_examples: " + std::to_string(a.train_examples);
  return "data:\n"
         "  train: {format: idx, images: " +
         file("train-images-idx3-ubyte.gz") + ", labels: " + file("train-labels-idx1-ubyte.gz") +
         cap + "}\n" + "  test: {format: idx, images: " + file("t10k-images-idx3-ubyte.gz") +
         ", labels: " + file("t10k-labels-idx1-ubyte.gz") + "}\n" + "  transform: {divisor: 255}\n";
}

absl::Status Train(const Args& a) {
  // World size 1 unless a launcher set YOKE_WORLD_SIZE and friends.
  YOKE_ASSIGN_OR_RETURN(yoke::DistributedContext ctx, yoke::DistributedContext::FromEnvironment());
  const bool root = ctx.rank() == 0;

  yoke::DataLoaderOptions train_options;
  train_options.batch_size = a.batch_size;
  train_options.seed = 1;
  train_options.rank = ctx.rank();
  train_options.world_size = ctx.world_size();
  YOKE_ASSIGN_OR_RETURN(yoke::DataLoader train,
                        yoke::DataLoader::FromYaml(DataYaml(a), "train", train_options));
  yoke::DataLoaderOptions test_options;
  test_options.batch_size = 1000;
  test_options.shuffle = false;
  YOKE_ASSIGN_OR_RETURN(yoke::DataLoader test,
                        yoke::DataLoader::FromYaml(DataYaml(a), "test", test_options));

  YOKE_ASSIGN_OR_RETURN(yoke::Model model,
                        yoke::ModelBuilder()
                            .Flatten()
                            .Dense(256)
                            .Relu()
                            .Dense(128)
                            .Relu()
                            .Dense(train.num_classes())
                            .Build(train.example_shape(), train.num_classes(), /*seed=*/1));
  YOKE_RETURN_IF_ERROR(ctx.BroadcastParameters(model));
  yoke::SgdOptions sgd;
  sgd.lr = a.lr;
  sgd.momentum = 0.9f;
  YOKE_ASSIGN_OR_RETURN(yoke::Optimizer optimizer, yoke::Optimizer::Sgd(model, sgd));

  yoke::EvalResult eval;
  yoke::Batch batch;
  for (int epoch = 0; epoch < a.epochs; ++epoch) {
    YOKE_RETURN_IF_ERROR(train.StartEpoch(epoch));
    double loss_sum = 0;
    int64_t seen = 0;
    while (true) {
      YOKE_ASSIGN_OR_RETURN(bool more, train.Next(&batch));
      if (!more) break;
      if (batch.size() > 0) {  // a short last batch may leave a rank nothing
        YOKE_ASSIGN_OR_RETURN(yoke::Tensor logits, model.Forward(batch));
        YOKE_ASSIGN_OR_RETURN(yoke::Loss loss, yoke::CrossEntropyLoss(logits, batch));
        YOKE_RETURN_IF_ERROR(loss.Backward());
        loss_sum += loss.sum();
        seen += loss.count();
      }
      // Every rank, every step: the mean gradient over the global batch.
      YOKE_RETURN_IF_ERROR(ctx.AllreduceGradients(model));
      YOKE_RETURN_IF_ERROR(optimizer.Step());
    }
    // Every rank evaluates the whole test split (the parameters are equal).
    YOKE_ASSIGN_OR_RETURN(eval, yoke::Evaluate(model, test));
    if (root) {
      std::printf("epoch %d train_loss=%.4f test_loss=%.4f test_accuracy=%.4f\n", epoch + 1,
                  loss_sum / static_cast<double>(seen > 0 ? seen : 1), eval.loss, eval.accuracy);
      std::fflush(stdout);
    }
  }
  std::printf("final rank=%d world_size=%d test_accuracy=%.4f params_checksum=%016" PRIx64 "\n",
              ctx.rank(), ctx.world_size(), eval.accuracy, model.Checksum());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<Args> args = ParseArgs(argc, argv);
  absl::Status s = args.ok() ? Train(*args) : args.status();
  if (!s.ok()) {
    std::fprintf(stderr, "custom_loop: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
